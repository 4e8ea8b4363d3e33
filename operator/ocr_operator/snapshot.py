"""One snapshot of everything an OcrService owns, read once per reconcile."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from . import children, naming
from .cache import Store
from .kube import Kube

# Plan key -> (kube kind, name function), from the one table of children.
CHILDREN: dict[str, tuple[str, Any]] = {c.key: (c.kind, c.name) for c in children.CHILDREN}


@dataclass(frozen=True)
class Snapshot:
    children: dict[str, dict[str, Any] | None]
    pods: list[dict[str, Any]]
    # Plan keys this snapshot read from the API (a GET by name): their absence is a fact, not
    # the cache's belief (the cache sees only labelled objects, see reconcile._confirm_creates).
    fetched: frozenset[str] = frozenset()

    @property
    def deployment(self) -> dict[str, Any] | None:
        return self.children.get("Deployment")

    @property
    def hpa(self) -> dict[str, Any] | None:
        return self.children.get("HorizontalPodAutoscaler")


async def read(kube: Kube, namespace: str, name: str, *, servicemonitor_available: bool = False,
                   store: Store | None = None, available: frozenset[str] | None = None) -> Snapshot:
    """The children and pods of OcrService `name`: from `store` (fed by the watches), reading
    with a GET or a LIST only what it has never seen; without a store, everything from the API.
    Optional kinds (children.optional_kinds) are read only when in `available`, the kinds the
    API serves (by default: ServiceMonitor when `servicemonitor_available`)."""
    if available is None:
        available = frozenset({"ServiceMonitor"}) if servicemonitor_available else frozenset()
    optional = children.optional_kinds()
    keys = [k for k in CHILDREN if CHILDREN[k][0] not in optional or CHILDREN[k][0] in available]

    fetched: set[str] = set()

    async def one(key: str) -> dict[str, Any] | None:
        kind, fn = CHILDREN[key]
        if store is None:
            fetched.add(key)
            return await kube.get(kind, namespace, fn(name))
        obj_key = (kind, namespace, fn(name))
        if not store.known(obj_key):
            fetched.add(key)
            obj = await kube.get(kind, namespace, fn(name))
            store.fetched(obj_key, obj)
            if not store.known(obj_key):
                return obj  # someone else's object: seen now, not cached (no watch event would update it)
        return store.get(obj_key)

    async def pods() -> list[dict[str, Any]]:
        if store is None:
            return await kube.list("Pod", namespace, naming.selector_string(name))
        if not store.pods_known(namespace, name):
            store.pods_listed(namespace, name, await kube.list("Pod", namespace, naming.selector_string(name)))
        return store.pods_of(namespace, name)

    results = await asyncio.gather(*(one(k) for k in keys), pods())
    found = dict(zip(keys, results[:-1]))
    for key, (kind, _) in CHILDREN.items():
        if kind in optional:
            found.setdefault(key, None)
    return Snapshot(children=found, pods=list(results[-1]), fetched=frozenset(fetched))
