"""One snapshot of everything an OcrService owns, read once per reconcile from the watch-fed cache."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ocr_operator.labels import LABEL_INSTANCE
from ocr_operator.runtime.controller import Runtime

from . import children, naming


@dataclass(frozen=True)
class Snapshot:
    children: dict[str, dict[str, Any] | None]  # by plan key; someone else's object as the cache's stub
    pods: list[dict[str, Any]]

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
    serves."""
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
    return Snapshot(children=found, pods=list(results[-1]))
