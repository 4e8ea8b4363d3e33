"""Which pods are an OcrService's: those its own Deployment's ReplicaSets control, by uid.

Labels say nothing about who made a pod: anyone who may create pods in the namespace can make one
carrying the instance and revision labels. Judged as the OcrService's, such a pod could fake Ready
(promoting a bad revision to the last good one), fake an OOM kill or a crash loop (forcing a
rollback), or take the quality gate's golden pages. So a pod counts only through the chain the
Kubernetes controllers themselves write: its controller ownerReference names a ReplicaSet (name
and uid), whose controller ownerReference names the Deployment by uid, which the OcrService
controls by uid. A decoy then takes the right to create ReplicaSets, not only pods (an
ownerReference may name any object): a ReplicaSet made so, the Deployment controller takes for
one of its own and scales as such.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ocr_operator.runtime.plan import controlled_by

REPLICASET = "ReplicaSet"


def controller_ref(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ownerReference of `obj` marked as its controller (there is at most one), or None."""
    return next((ref for ref in (obj.get("metadata") or {}).get("ownerReferences") or ()
                 if ref.get("controller") is True), None)


def replicaset_names(pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The ReplicaSets `pods` name as their controller: the ones to look up."""
    return {str(ref.get("name")) for pod in pods
            if (ref := controller_ref(pod)) is not None and ref.get("kind") == REPLICASET}


def controlled_pods(pods: Iterable[Mapping[str, Any]], replicasets: Mapping[str, Mapping[str, Any]],
                    deployment: Mapping[str, Any] | None, owner_uid: str) -> list[Mapping[str, Any]]:
    """The pods of `pods` that belong to the OcrService of uid `owner_uid`: controlled by a
    ReplicaSet of `replicasets` (by name, with the uid the reference names) that `deployment`
    controls (by uid), itself controlled by the OcrService. Any other pod, whatever its labels,
    is ignored; so are all of them without such a Deployment."""
    if deployment is None or not controlled_by(deployment, owner_uid):
        return []
    deployment_uid = (deployment.get("metadata") or {}).get("uid")
    if not deployment_uid:
        return []
    mine = {name: uid for name, rs in replicasets.items()
            if (uid := (rs.get("metadata") or {}).get("uid")) and controlled_by(rs, deployment_uid)}
    return [pod for pod in pods
            if (ref := controller_ref(pod)) is not None and ref.get("kind") == REPLICASET
            and ref.get("uid") and mine.get(ref.get("name")) == ref.get("uid")]
