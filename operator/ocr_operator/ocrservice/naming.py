"""An OcrService's children's names, labels, selectors, owner reference and the pod-template
revision hash."""

from __future__ import annotations

import copy
from typing import Any, Mapping

from ocr_operator.labels import APP_NAME, LABEL_INSTANCE, LABEL_NAME, PREFIX, common
from ocr_operator.runtime.plan import controller_reference, short_hash
from ocr_operator.spec import API_VERSION, KIND

COMPONENT = "inference-server"
REVISION_KEY = f"{PREFIX}/revision"
# The pods' readiness gate of an OcrService with spec.rollout.qualityGate (gate/).
GATE_CONDITION = f"{PREFIX}/quality-gate"


def deployment_name(name: str) -> str:
    return name


def service_name(name: str) -> str:
    return name


def configmap_name(name: str) -> str:
    return f"{name}-config"


def revisions_name(name: str) -> str:
    return f"{name}-revisions"


def quality_name(name: str) -> str:
    return f"{name}-quality"


def gate_key_name(name: str) -> str:
    """The quality gate's key Secret (gatekey.py), only with spec.auth and a gate."""
    return f"{name}-gate-key"


def hpa_name(name: str) -> str:
    return name


def pdb_name(name: str) -> str:
    return name


def networkpolicy_name(name: str) -> str:
    return name


def servicemonitor_name(name: str) -> str:
    return name


def prometheusrule_name(name: str) -> str:
    return name


def selector_labels(name: str) -> dict[str, str]:
    """The immutable Deployment selector: never add a label that can change."""
    return {LABEL_NAME: APP_NAME, LABEL_INSTANCE: name}


def selector_string(name: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(name).items())


def labels(name: str) -> dict[str, str]:
    """Labels on every child object (and on the pods)."""
    return {**common(COMPONENT), **selector_labels(name)}


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return controller_reference(API_VERSION, KIND, name, uid)


def metadata(owner: Mapping[str, Any], name: str, extra_annotations: Mapping[str, str] | None = None) -> dict:
    """Metadata of a child: name, namespace, labels, ownerReference."""
    md = owner["metadata"]
    out: dict[str, Any] = {
        "name": name,
        "namespace": md["namespace"],
        "labels": labels(md["name"]),
        "ownerReferences": [owner_reference(md["name"], md["uid"])],
    }
    if extra_annotations:
        out["annotations"] = dict(extra_annotations)
    return out


def _hashed_form(pod_template: Mapping[str, Any]) -> dict[str, Any]:
    """What a revision hashes: the pod template without the revision label/annotation themselves
    (so stamping it does not change it)."""
    tpl = copy.deepcopy(dict(pod_template))
    md = tpl.get("metadata") or {}
    for key in ("labels", "annotations"):
        if isinstance(md.get(key), dict):
            md[key].pop(REVISION_KEY, None)
            if not md[key]:
                md.pop(key)
    return tpl


def template_digest(pod_template: Mapping[str, Any]) -> str:
    """The full sha256 (64 hex) of a rendered pod template, over the canonical form its revision
    hashes. The revision (template_hash) is its first 10 hex chars, short because it is a label
    value: 40 bits that a forger can match. A rollback trusts a stored template only when this
    full digest equals the one the operator recorded in the status."""
    return short_hash(_hashed_form(pod_template), 64)


def template_hash(pod_template: Mapping[str, Any]) -> str:
    """Revision of a rendered pod template: 10 hex chars of sha256 over its canonical JSON,
    without the revision label/annotation themselves (so stamping it does not change it); the
    prefix of template_digest."""
    return short_hash(_hashed_form(pod_template))
