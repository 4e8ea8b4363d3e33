"""One snapshot of everything an OcrService owns, read once per reconcile."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from . import children, naming
from .kube import Kube

# Plan key -> (kube kind, name function), from the one table of children.
CHILDREN: dict[str, tuple[str, Any]] = {c.key: (c.kind, c.name) for c in children.CHILDREN}


@dataclass(frozen=True)
class Snapshot:
    children: dict[str, dict[str, Any] | None]
    pods: list[dict[str, Any]]

    @property
    def deployment(self) -> dict[str, Any] | None:
        return self.children.get("Deployment")

    @property
    def hpa(self) -> dict[str, Any] | None:
        return self.children.get("HorizontalPodAutoscaler")


child_names = children.child_names


async def snapshot(kube: Kube, namespace: str, name: str, *, servicemonitor_available: bool) -> Snapshot:
    keys = [k for k in CHILDREN if k != "ServiceMonitor" or servicemonitor_available]

    async def one(key: str) -> dict[str, Any] | None:
        kind, fn = CHILDREN[key]
        return await kube.get(kind, namespace, fn(name))

    results = await asyncio.gather(*(one(k) for k in keys),
                                   kube.list("Pod", namespace, naming.selector_string(name)))
    children = dict(zip(keys, results[:-1]))
    children.setdefault("ServiceMonitor", None)
    return Snapshot(children=children, pods=list(results[-1]))
