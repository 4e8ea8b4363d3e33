"""The sole writer of children: server-side apply with one field manager, deletes by uid.

A plan with only Skip actions makes no request at all.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from . import children
from .kube import ApiError, Kube, retrying
from .plan import CONFLICT, CREATE, DELETE, UPDATE, Action

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    live: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    writes: int = 0
    written: set[str] = field(default_factory=set)  # plan keys whose write succeeded


async def _one(kube: Kube, action: Action, namespace: str, out: Outcome) -> None:
    log.debug("%s/%s: %s", namespace, action.name, action)  # the reconcile logs them all in one line
    try:
        if action.verb in (CREATE, UPDATE):
            try:
                out.live[action.kind] = await retrying(lambda: kube.apply(action.body))
            except ApiError as exc:
                if exc.status != 422 or action.verb != UPDATE:
                    raise
                # Another field manager changed a key of a list we own (a Service port, a
                # container's name): our apply then adds a second entry and the result is
                # invalid. Put our lists back wholesale (a merge patch replaces lists), then apply.
                log.warning("%s/%s: apply refused (%s); replacing the drifted fields", namespace, action.name,
                            exc.message)
                await retrying(lambda: kube.merge_patch(action.body["kind"], namespace, action.name,
                                                        repair_patch(action.body)))
                out.writes += 1
                out.live[action.kind] = await retrying(lambda: kube.apply(action.body))
            out.writes += 1
            out.written.add(action.kind)
        elif action.verb == DELETE:
            obs = action.observed or {}
            await retrying(lambda: kube.delete(obs.get("kind") or action.kind, namespace, action.name,
                                               uid=obs.get("metadata", {}).get("uid")))
            out.live[action.kind] = None
            out.writes += 1
            out.written.add(action.kind)
    except ApiError as exc:
        if exc.retryable:
            raise
        # Invalid for the API server (e.g. a bad affinity): report it, do not crash-loop.
        out.errors.append(f"{action.verb} {action.kind} {action.name}: {exc.message}")


def repair_patch(body: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that sets every top-level field we render (lists replaced whole)."""
    return {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}


async def execute(kube: Kube, actions: list[Action], *, namespace: str) -> Outcome:
    """Run the plan: every child at once (a new Deployment's pods that start before their
    ConfigMap exists wait for the mount)."""
    out = Outcome()
    writes: list[Action] = []
    for action in actions:
        if action.verb == CONFLICT:
            # Someone else's object: never written, and never read as ours (status, rollout).
            out.live[action.kind] = None
            kind = children.BY_KEY[action.kind].kind if action.kind in children.BY_KEY else action.kind
            out.conflicts.append(f"{kind} {action.name} {action.reason}")
            continue
        out.live[action.kind] = action.observed
        if action.writes:
            writes.append(action)
    results = await asyncio.gather(*(_one(kube, a, namespace, out) for a in writes), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise failures[0]
    return out
