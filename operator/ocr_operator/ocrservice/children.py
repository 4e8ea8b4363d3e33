"""The one table of what the OcrService controller reads, watches and writes.

The watches (settings.py, handlers.py), the REST paths (the runtime's client), the snapshot
(snapshot.py), the cache and the chart's RBAC rules (checked by tests/unit/chart/test_rbac_rules.py)
all follow from it; garbage collection follows from the ownerReference every child in
``CHILDREN`` carries (naming.metadata), so removing an OcrService removes exactly these.
Add a kind here and every one of those places picks it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ocr_operator.runtime.kinds import READ, WRITE, ApiKind
from ocr_operator.spec import GROUP, KIND, PLURAL, VERSION

from . import naming

OCRSERVICE = ApiKind(KIND, GROUP, VERSION, PLURAL, READ)

# The kinds applied are `owned`: watched unfiltered, so the cache knows every name taken in the
# namespace and the apply's ownership check costs no request (runtime/cache.py).
KINDS: dict[str, ApiKind] = {k.kind: k for k in (
    ApiKind("ConfigMap", "", "v1", "configmaps", READ + WRITE, owned=True),
    ApiKind("HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers", READ + WRITE,
            status_read=True, owned=True),
    ApiKind("Deployment", "apps", "v1", "deployments", READ + WRITE, status_read=True, owned=True),
    ApiKind("Service", "", "v1", "services", READ + WRITE, owned=True),
    ApiKind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", READ + WRITE, owned=True),
    ApiKind("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies", READ + WRITE, owned=True),
    ApiKind("ServiceMonitor", "monitoring.coreos.com", "v1", "servicemonitors", READ + WRITE, optional=True,
            owned=True),
    ApiKind("PrometheusRule", "monitoring.coreos.com", "v1", "prometheusrules", READ + WRITE, optional=True,
            owned=True),
    # Pods are only read: the rollout judges the new revision's pods from what Kubernetes reports.
    ApiKind("Pod", "", "v1", "pods", ("list", "watch"), status_read=True),
    # The Deployment's ReplicaSets, only read: a pod counts for the rollout only when its
    # controller is one of them (rollout/owners.py). Watched by the managed-by label (they carry
    # the pod template's labels) and cached as their owner chain only; nothing of theirs is judged.
    ApiKind("ReplicaSet", "apps", "v1", "replicasets", ("list", "watch"), metadata_only=True),
)}


@dataclass(frozen=True)
class Child:
    """One object an OcrService owns: its plan key, its kind and its name."""

    key: str
    kind: str
    name: Callable[[str], str]


# Apply order: the HPA before the Deployment (a Deployment applied without replicas is never
# left without an owner of its size), the ConfigMap before the pods that mount it.
CHILDREN: tuple[Child, ...] = (
    Child("ConfigMap", "ConfigMap", naming.configmap_name),
    Child("HorizontalPodAutoscaler", "HorizontalPodAutoscaler", naming.hpa_name),
    Child("Deployment", "Deployment", naming.deployment_name),
    Child("Service", "Service", naming.service_name),
    Child("PodDisruptionBudget", "PodDisruptionBudget", naming.pdb_name),
    Child("NetworkPolicy", "NetworkPolicy", naming.networkpolicy_name),
    Child("ServiceMonitor", "ServiceMonitor", naming.servicemonitor_name),
    Child("PrometheusRule", "PrometheusRule", naming.prometheusrule_name),
    # The pod templates of past revisions (revisions.py), a second ConfigMap.
    Child("RevisionHistory", "ConfigMap", naming.revisions_name),
    # The quality gate's recorded outputs (gate/), a third ConfigMap; only with a gate.
    Child("QualityRecords", "ConfigMap", naming.quality_name),
)
BY_KEY: dict[str, Child] = {c.key: c for c in CHILDREN}


def child_names(name: str) -> dict[str, str]:
    """Plan key -> name of that child of the OcrService `name`."""
    return {c.key: c.name(name) for c in CHILDREN}


def optional_kinds() -> tuple[str, ...]:
    """Kinds served only where a CRD provides them: rendered and read only while served."""
    return tuple(k.kind for k in KINDS.values() if k.optional)


def watched() -> tuple[ApiKind, ...]:
    """Kinds whose watch streams feed the cache and wake the owner (owned ones unfiltered)."""
    return tuple(k for k in KINDS.values() if k.watched)


# The quality gate (gate/) sets its readiness condition on pods: their status subresource only.
POD_STATUS_RULE = (("", "pods/status"), frozenset({"patch"}))
# spec.model.source.s3: the fetching pod's last progress line, from its model-fetch container's log
# (fetchprogress.py; the OcrBatch controller reads its workers' logs alike).
POD_LOG_RULE = (("", "pods/log"), frozenset({"get"}))
# The gate's key with spec.auth (gatekey.py): its own Secret created, and patched only after the
# patch's test of its ownerReference; never read, listed or watched.
GATE_KEY_SECRET = ApiKind("Secret", "", "v1", "secrets", ("create", "patch"), watched=False)


def rbac_rules() -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs the operator needs on the children and pods."""
    return {**{(k.group, k.plural): frozenset(k.verbs) for k in KINDS.values()}, POD_STATUS_RULE[0]: POD_STATUS_RULE[1],
            POD_LOG_RULE[0]: POD_LOG_RULE[1], (GATE_KEY_SECRET.group, GATE_KEY_SECRET.plural): frozenset(GATE_KEY_SECRET.verbs)}


def objects(name: str) -> list[tuple[str, str]]:
    """(kind, name) of every child of the OcrService `name`."""
    return [(c.kind, c.name(name)) for c in CHILDREN]
