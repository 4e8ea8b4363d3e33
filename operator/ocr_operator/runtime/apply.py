"""The one writer of children: runs a plan (plan.py) against the API server, and tells the cache.

Creates and updates are server-side applies with the operator's one field manager; deletes carry
the observed uid as a precondition, so a same-named object made meanwhile is never deleted. The
ownership checks were made by the plan on the cache's view, which knows every taken name of the
kinds applied (cache.py), so they cost no request. A `create_only` child (a Job) is created
with a plain create instead, which the API server refuses when the name is taken (409): the
object is then read once and planned again, which tells ours (left as it is) from someone
else's (a conflict). Every write's result goes into the cache at once (write-through), so the
next reconcile sees it before its watch event. A plan with only Skip actions makes no request.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from .cache import Store
from .kube import ApiError, Kube, retrying
from .plan import CONFLICT, CREATE, DELETE, UPDATE, Action

log = logging.getLogger(__name__)

# Plans one child again from what a GET found (the create found the name taken).
Replan = Callable[[Action, dict[str, Any]], Action]


@dataclass
class Outcome:
    live: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # by child key, ours only
    errors: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # what a status reports of each
    conflicted: set[str] = field(default_factory=set)  # keys whose name someone else's object holds
    writes: int = 0
    written: set[str] = field(default_factory=set)  # keys whose write succeeded


def repair_patch(body: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that sets every top-level field we render (lists replaced whole)."""
    return {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}


def _conflict(out: Outcome, action: Action) -> None:
    """Someone else's object: never written, and never read as the owner's (status, rollout)."""
    out.live[action.key] = None
    out.conflicted.add(action.key)
    out.conflicts.append(f"{action.api_kind} {action.name} {action.reason}")


class Applier:
    """Runs plans with `kube`, keeping `store` current."""

    def __init__(self, kube: Kube, store: Store) -> None:
        self.kube, self.store = kube, store

    async def _create(self, action: Action, namespace: str, out: Outcome, replan: Replan) -> None:
        assert action.body is not None

        async def create() -> dict[str, Any] | None:
            try:
                return await self.kube.create(action.api_kind, namespace, action.body)
            except ApiError as exc:
                if exc.status == 409:  # the name is taken: no retry will change that
                    return None
                raise

        created = await retrying(create)
        if created is None:
            found = await self.kube.get(action.api_kind, namespace, action.name)
            self.store.fetched((action.api_kind, namespace, action.name), found)
            again = replan(action, found) if found is not None else action
            if again.verb == CONFLICT:
                _conflict(out, again)
            else:  # ours after all (an earlier create of ours), or gone again: looked at next time
                out.live[action.key] = found
            return
        out.live[action.key] = created
        out.writes += 1
        out.written.add(action.key)

    async def _apply(self, action: Action, namespace: str, out: Outcome) -> None:
        assert action.body is not None
        try:
            out.live[action.key] = await retrying(lambda: self.kube.apply(action.body))
        except ApiError as exc:
            if exc.status != 422 or action.verb != UPDATE:
                raise
            # Another field manager changed a key of a list we own (a Service port, a
            # container's name): our apply then adds a second entry and the result is
            # invalid. Put our lists back wholesale (a merge patch replaces lists), then apply.
            log.warning("%s/%s: apply refused (%s); replacing the drifted fields", namespace, action.name, exc.message)
            await retrying(lambda: self.kube.merge_patch(action.api_kind, namespace, action.name,
                                                         repair_patch(action.body)))
            out.writes += 1
            out.live[action.key] = await retrying(lambda: self.kube.apply(action.body))
        out.writes += 1
        out.written.add(action.key)

    async def _one(self, action: Action, namespace: str, out: Outcome, replan: Replan) -> None:
        log.debug("%s/%s: %s", namespace, action.name, action)  # the reconcile logs them all in one line
        try:
            if action.verb == CREATE and action.create_only:
                await self._create(action, namespace, out, replan)
            elif action.verb in (CREATE, UPDATE):
                await self._apply(action, namespace, out)
            elif action.verb == DELETE:
                obs = action.observed or {}
                await retrying(lambda: self.kube.delete(action.api_kind, namespace, action.name,
                                                        uid=obs.get("metadata", {}).get("uid")))
                out.live[action.key] = None
                out.writes += 1
                out.written.add(action.key)
        except ApiError as exc:
            if exc.retryable:
                raise
            # Invalid for the API server (e.g. a bad affinity): report it, do not crash-loop.
            out.errors.append(f"{action.verb} {action.api_kind} {action.name}: {exc.message}")

    async def execute(self, actions: list[Action], *, namespace: str, replan: Replan) -> Outcome:
        """Run the plan: every child at once (a new Deployment's pods that start before their
        ConfigMap exists wait for the mount). `replan`: plans a child again from what a GET found."""
        out = Outcome()
        writes: list[Action] = []
        for action in actions:
            if action.verb == CONFLICT:
                _conflict(out, action)
                continue
            out.live[action.key] = action.observed
            if action.writes:
                writes.append(action)
        results = await asyncio.gather(*(self._one(a, namespace, out, replan) for a in writes),
                                       return_exceptions=True)
        for action in writes:
            if action.key in out.written:
                self.store.wrote(action.api_kind, namespace, action.name, out.live.get(action.key))
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            raise failures[0]
        return out
