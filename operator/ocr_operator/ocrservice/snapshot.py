"""One snapshot of everything an OcrService owns, read once per reconcile from the watch-fed cache."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ocr_operator.labels import LABEL_INSTANCE
from ocr_operator.runtime.controller import Runtime

from . import children, naming, rollout
from .rollout.owners import REPLICASET


@dataclass(frozen=True)
class Snapshot:
    children: dict[str, dict[str, Any] | None]  # by plan key; someone else's object as the cache's stub
    pods: list[dict[str, Any]]  # by label: the rollout counts only those of `replicasets` (rollout/owners.py)
    replicasets: dict[str, dict[str, Any]]  # by name, the ones `pods` name as their controller, as cached

    @property
    def deployment(self) -> dict[str, Any] | None:
        return self.children.get("Deployment")

    @property
    def hpa(self) -> dict[str, Any] | None:
        return self.children.get("HorizontalPodAutoscaler")


async def read(rt: Runtime, namespace: str, name: str, *, available: frozenset[str] = frozenset()) -> Snapshot:
    """The children and pods of OcrService `name` from the runtime's cache (fed by the watches),
    reading with a GET or a LIST only what it has never seen (a namespace it could not list).
    Optional kinds (children.optional_kinds) are read only when in `available`, the kinds the API
    serves. The ReplicaSets the pods name as their controller come from the cache as well (their
    watch); an absent one is remembered, and its watch event wakes the reconcile when it comes."""
    optional = children.optional_kinds()
    wanted = [c for c in children.CHILDREN if c.kind not in optional or c.kind in available]
    kube, store = rt.kube, rt.store

    async def pods() -> list[dict[str, Any]]:
        if not store.pods_known(namespace, LABEL_INSTANCE, name):
            store.pods_listed(namespace, LABEL_INSTANCE, name,
                              await kube.list("Pod", namespace, naming.selector_string(name)))
        return store.pods_of(namespace, LABEL_INSTANCE, name)

    results = await asyncio.gather(*(rt.read(c.kind, namespace, c.name(name)) for c in wanted), pods())
    found: dict[str, dict[str, Any] | None] = {c.key: None for c in children.CHILDREN}
    found.update({c.key: obj for c, obj in zip(wanted, results[:-1])})
    pods_found = list(results[-1])
    rs_names = sorted(rollout.replicaset_names(pods_found))
    rs_found = await asyncio.gather(*(rt.read(REPLICASET, namespace, rs_name) for rs_name in rs_names))
    replicasets = {rs_name: rs for rs_name, rs in zip(rs_names, rs_found) if rs is not None}
    return Snapshot(children=found, pods=pods_found, replicasets=replicasets)
