"""Pure render functions: OcrService (+ parsed spec) -> desired child manifests. No I/O."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from ..children import CHILDREN
from . import configmap, deployment, hpa, networkpolicy, pdb, prometheusrule, service, servicemonitor

# The children rendered from the spec, in apply order (children.CHILDREN minus the revision
# history and the quality gate's records, which revisions.py and rollout/verdict.py render from state).
KINDS = tuple(c.key for c in CHILDREN if c.key not in ("RevisionHistory", "QualityRecords"))


@dataclass(frozen=True)
class Desired:
    """Every child the OcrService should have; None = must not exist."""

    objects: Mapping[str, dict[str, Any] | None]
    pod_template: dict[str, Any]
    revision: str
    active_schedule: str | None
    scaled_to_zero_by: str | None = None  # the schedule window that scales the service to zero


def render_all(
    owner: Mapping[str, Any],
    spec: OcrServiceSpec,
    *,
    now: dt.datetime | None = None,
    pod_template: dict[str, Any] | None = None,
    servicemonitor_available: bool = True,
    available: frozenset[str] | None = None,
) -> Desired:
    """Render all children. `pod_template` overrides the freshly rendered template (rollback to
    the last good revision); everything else always follows the current spec. Kinds only a CRD
    provides are rendered when in `available` (None: every one, unless servicemonitor_available
    is False)."""

    def served(kind: str) -> bool:
        return kind in available if available is not None else (kind != "ServiceMonitor" or servicemonitor_available)

    cm = configmap.render(owner, spec)
    fresh = deployment.render_pod_template(owner, spec, config_hash=configmap.config_hash(cm))
    template = pod_template if pod_template is not None else fresh
    min_replicas, schedule = (spec.autoscaling.effective_min_replicas(now) if spec.autoscaling else (None, None))
    # A window with minReplicas 0: no HPA (it never scales from zero), the Deployment at 0.
    to_zero = schedule if spec.autoscaling is not None and min_replicas == 0 else None
    objects: dict[str, dict[str, Any] | None] = {
        "ConfigMap": cm,
        "HorizontalPodAutoscaler": None if to_zero else hpa.render(owner, spec, min_replicas=min_replicas),
        "Deployment": deployment.render(owner, spec, template,
                                        replicas=0 if to_zero else spec.deployment_replicas(min_replicas)),
        "Service": service.render(owner, spec),
        "PodDisruptionBudget": pdb.render(owner, spec),
        "NetworkPolicy": networkpolicy.render(owner, spec),
        "ServiceMonitor": servicemonitor.render(owner, spec) if served("ServiceMonitor") else None,
        "PrometheusRule": prometheusrule.render(owner, spec) if served("PrometheusRule") else None,
    }
    return Desired(objects=objects, pod_template=fresh, revision=deployment.revision_of(fresh),
                   active_schedule=schedule, scaled_to_zero_by=to_zero)
