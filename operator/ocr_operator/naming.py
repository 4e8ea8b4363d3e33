"""Names, labels, selectors, owner references and the pod-template revision hash."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any, Mapping

from .spec import API_VERSION, KIND

FIELD_MANAGER = "causalflow-ocr-operator"
USER_AGENT = "causalflow-ocr-operator"
APP_NAME = "causalflow-ocr"
COMPONENT = "inference-server"

PREFIX = "ocr.causalflow.dev"
REVISION_KEY = f"{PREFIX}/revision"
APPLIED_HASH_KEY = f"{PREFIX}/applied-hash"
KOPF_PREFIX = f"kopf.{PREFIX}"
# The pods' readiness gate of an OcrService with spec.rollout.qualityGate (quality.py).
GATE_CONDITION = f"{PREFIX}/quality-gate"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"


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
    return {
        **selector_labels(name),
        LABEL_COMPONENT: COMPONENT,
        LABEL_PART_OF: APP_NAME,
        LABEL_MANAGED_BY: FIELD_MANAGER,
    }


def owner_reference(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


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


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def short_hash(value: Any, length: int = 10) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


def template_hash(pod_template: Mapping[str, Any]) -> str:
    """Revision of a rendered pod template: 10 hex chars of sha256 over its canonical JSON,
    without the revision label/annotation themselves (so stamping it does not change it)."""
    tpl = copy.deepcopy(dict(pod_template))
    md = tpl.get("metadata") or {}
    for key in ("labels", "annotations"):
        if isinstance(md.get(key), dict):
            md[key].pop(REVISION_KEY, None)
            if not md[key]:
                md.pop(key)
    return short_hash(tpl)
