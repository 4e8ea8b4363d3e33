"""Optional APIs (a CRD such as prometheus-operator's ServiceMonitor): which are served, and making
kopf watch one that appeared after it started.

``Discovery`` asks the API server every DISCOVERY_SECONDS whether each optional kind is served; a
change wakes every object of every controller (a ServiceMonitor to create or to stop rendering),
and for an API that appeared it calls ``rescan``. A CRD that is deleted and installed again
between two looks (a reinstall of prometheus-operator) is no change to that poll, yet the API
server deleted every object of the kind with the old CRD; the CRDs' watch events tell it
(``crd_event``: a deletion, or a new uid), and the kind's cached objects are then forgotten. A
CRD seen deleted or being deleted also makes its kind not served at once: discovery may list it
a moment longer, and a ServiceMonitor created then would fail (the OcrService Degraded until the
next look).

kopf starts watching a custom resource when a CustomResourceDefinition event arrives and the API
server's discovery already lists the resource: on each CRD event it rescans that CRD's group, and
at no other time. The API server publishes a new CRD in discovery a moment after the CRD's last
event (Established), so kopf can miss it and never watch the kind until the operator restarts. A
ServiceMonitor changed by someone else would then be repaired only at the next resync (minutes).
``rescan(group)`` does what kopf does for a CRD event.

The other way round, kopf stops the whole operator when a watch of a deleted CRD's resource is
answered 404: its per-resource watch tolerates only 429, and a failed watch fails its
orchestrator, a root task. That happens when kopf's own rescan at the CRD's deletion event still
found the resource in discovery (which lags the deletion): the API server closes the watch about
a second later, the re-watch is answered 404, and ``python -m ocr_operator`` exits 1.
``survive_lost_apis`` wraps kopf's per-resource watch so that a 404 for an optional API's group
ends that one stream quietly and asks kopf to rescan the group, which then stops the watch.
A 403 stopped it the same way: an operator whose RBAC leaves out prometheus-operator's group (a
hand-written Role, a policy that strips it), on a cluster where that CRD is installed, exited 1 at
every start, for a feature it can do without. Such a watch now ends quietly too and is tried again
with the same backoff, and ``Discovery.permitted`` is told: a kind the operator may not list in
one of its namespaces (the cache's first listing, or a watch, answered 403) is not available, as if
not served (no ServiceMonitor rendered, read or deleted). kopf stops watching it (left alone, kopf
retries each refused request nine times over a minute, each an ERROR line, again and again), and
``Discovery.check`` lists it again at each look: once allowed, the kind is available and handed to
kopf's rescan, as an API that appeared. A watch of a kind already known refused (the cache's first
listing, before kopf's watches start, was answered 403) ends at once, without kopf's listing: that
first listing alone cost a minute of kopf's retries and nine ERROR lines at every start.

These two are the operator's uses of kopf's internals, both in this module (kopf is pinned to a
minor version in pyproject.toml, and tests/unit/operator/runtime/test_discovery.py fails if those
internals move).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Collection, Mapping

import kopf

from .kinds import ApiKind
from .kube import ApiError, Kube

log = logging.getLogger(__name__)

# How often to look again whether optional APIs (ServiceMonitor, PrometheusRule) are served.
DISCOVERY_SECONDS = float(os.environ.get("OCR_OPERATOR_DISCOVERY_SECONDS", "60"))


def new_insights() -> Any:
    """The object kopf keeps its served resources in; `kopf.run(insights=...)` takes it."""
    from kopf._cogs.structs.references import Insights

    return Insights()


async def rescan(insights: Any, settings: kopf.OperatorSettings, group: str, registry: Any = None) -> int:
    """Make kopf (re)scan API group `group` and watch what it serves now, as on a CRD event; the
    number of resources it found. `insights` is the object passed to `kopf.run`."""
    from kopf._cogs.clients import scanning
    from kopf._core.reactor import observation

    registry = registry if registry is not None else kopf.get_default_registry()
    resources = await scanning.scan_resources(groups={group}, settings=settings, logger=log)
    async with insights.revised:
        observation.revise_resources(resources=resources, insights=insights, registry=registry, group=group)
        await insights.backbone.fill(resources=resources)
        insights.revised.notify_all()
    log.info("asked kopf to rescan API group %s: %d resource(s) served", group, len(resources))
    return len(resources)


# The longest wait between two tries of a watch whose API keeps answering 404 while discovery
# still lists it (each try also asks discovery again), or 403; the first waits are kopf's reconnect backoff.
LOST_API_MAX_BACKOFF = 60.0


# Told whether the operator may list and watch an optional resource ("<plural>.<group>") in a
# namespace (None: cluster-wide): False on a 403, True when a watch lists again after one.
Permission = Callable[[str, "str | None", bool], None]
# Whether the operator is known not to be allowed to list an optional resource in a namespace.
Refused = Callable[[str, "str | None"], bool]


def survive_lost_apis(insights: Any, groups: Collection[str], on_permission: Permission | None = None,
                      known_refused: Refused | None = None) -> None:
    """From now on, a watch of a resource in one of `groups` whose LIST or WATCH is answered 404
    (its CRD deleted) or 403 (the operator may not read it) ends quietly instead of stopping kopf,
    and is tried again with a backoff that doubles per answer up to LOST_API_MAX_BACKOFF. On a 404
    kopf is asked to rescan the group (`rescan`), which stops the watch once discovery no longer
    lists the resource; a 403, and the first listing after it, go to `on_permission`. A watch of a
    resource `known_refused` ends as on a 403 without asking the API server (kopf's listing would
    retry the 403 nine times over a minute)."""
    from kopf._cogs.clients import errors, watching

    original = getattr(watching.continuous_watch, "__wrapped__", watching.continuous_watch)
    lost: dict[tuple[Any, Any], int] = {}  # (resource, namespace) -> 404 or 403 answers in a row
    refused: set[tuple[Any, Any]] = set()  # answered 403 last time

    async def continuous_watch(*, settings: kopf.OperatorSettings, resource: Any, namespace: Any,
                               **kwargs: Any) -> AsyncIterator[Any]:
        key, name = (resource, namespace), f"{resource.plural}.{resource.group}"
        try:
            forbidden = resource.group in groups and known_refused is not None and known_refused(name, namespace)
            if not forbidden:
                async for item in original(settings=settings, resource=resource, namespace=namespace, **kwargs):
                    lost.pop(key, None)
                    if key in refused:
                        refused.discard(key)
                        if on_permission is not None:
                            on_permission(name, namespace, True)
                    yield item
                return
        except (errors.APINotFoundError, errors.APIForbiddenError) as exc:
            if resource.group not in groups:
                raise
            forbidden = isinstance(exc, errors.APIForbiddenError)
        times = lost[key] = lost.get(key, 0) + 1
        if forbidden:
            refused.add(key)
            if on_permission is not None:
                on_permission(name, namespace, False)
            await stop_watching(insights, resource)
        else:
            log.warning("the API of %s is gone (404): asking kopf to rescan %s (try %d)", resource.plural,
                        resource.group, times)
            try:
                await rescan(insights, settings, resource.group)
            except Exception:  # noqa: BLE001 - the next 404 asks again
                log.exception("kopf rescan of API group %s failed", resource.group)
        # kopf waits its reconnect backoff after this: in all 1, 2, 4 ... of those.
        await asyncio.sleep(min(LOST_API_MAX_BACKOFF, settings.watching.reconnect_backoff * (2 ** (times - 1) - 1)))

    continuous_watch.__wrapped__ = original  # type: ignore[attr-defined]
    watching.continuous_watch = continuous_watch


async def stop_watching(insights: Any, resource: Any) -> None:
    """kopf's orchestrator ends its watch of `resource` (a kopf Resource) until a rescan of its
    group finds it again (`rescan`)."""
    async with insights.revised:
        insights.watched_resources.discard(resource)
        insights.revised.notify_all()


class Discovery:
    """Which of the optional `kinds` the API serves, re-checked every `seconds`."""

    def __init__(self, kube: Kube, kinds: Mapping[str, ApiKind], *, on_change: Callable[[frozenset[str]], None],
                 rescan: Callable[[str], Awaitable[Any]] | None = None, seconds: float = DISCOVERY_SECONDS) -> None:
        self.kube = kube
        self.kinds = dict(kinds)
        self.on_change = on_change  # called with the kinds whose availability changed
        self.rescan = rescan
        self.seconds = seconds
        self.served: dict[str, bool] = {kind: False for kind in self.kinds}
        self.checked: float | None = None  # monotonic time of the last look
        self.by_crd = {k.resource: name for name, k in self.kinds.items()}
        # By kind: the uid of its CRD as last seen; None: last seen deleted or being deleted.
        self.crd_uids: dict[str, str | None] = {}
        self.refused: set[tuple[str, str | None]] = set()  # (kind, namespace) the API server answered 403

    def crd_event(self, event_type: str | None, crd: Mapping[str, Any]) -> str | None:
        """A CustomResourceDefinition's watch event: the optional kind whose objects went with its
        CRD (deleted, or replaced by one with a new uid), else None. The next `check` asks again."""
        md = crd.get("metadata") or {}
        kind = self.by_crd.get(md.get("name") or "")
        if kind is None:
            return None
        seen, was = self.crd_uids.get(kind), kind in self.available
        deleting = event_type == "DELETED" or bool(md.get("deletionTimestamp"))
        uid = None if deleting else md.get("uid")
        self.crd_uids[kind] = uid
        if deleting:
            self.served[kind] = False
        if uid == seen or (event_type is None and seen is None):  # no news, or the first listing
            return None
        self.checked = None
        return kind if seen is not None or was else None

    def gone(self, kind: str) -> bool:
        """Whether `kind`'s CRD was last seen deleted or being deleted: not served, whatever
        discovery still lists."""
        return kind in self.crd_uids and self.crd_uids[kind] is None

    def permitted(self, resource: str, namespace: str | None, allowed: bool) -> None:
        """Whether the operator may list and watch `resource` ("<plural>.<group>") in `namespace`
        (a 403 of the cache's first listing or of a watch; a watch that lists again): a kind it may
        not read in one of its namespaces is not available until it may."""
        kind = self.by_crd.get(resource)
        if kind is None:
            return
        before = self.available
        self._refuse(kind, namespace, not allowed)
        now = self.available
        if now != before:
            self.on_change(now ^ before)

    def is_refused(self, resource: str, namespace: str | None) -> bool:
        """Whether the operator was last answered 403 listing `resource` ("<plural>.<group>") in
        `namespace`: kopf's watch of it need not ask again (survive_lost_apis' `known_refused`)."""
        kind = self.by_crd.get(resource)
        return kind is not None and (kind, namespace) in self.refused

    def _refuse(self, kind: str, namespace: str | None, refused: bool) -> None:
        key, where, resource = (kind, namespace), f" in {namespace}" if namespace else "", self.kinds[kind].resource
        if refused and key not in self.refused:
            self.refused.add(key)
            log.error("the operator may not list and watch %s%s (403): %ss are not managed until it may "
                      "(the chart's Role grants it)", resource, where, kind)
        elif not refused and key in self.refused:
            self.refused.discard(key)
            log.info("the operator may list and watch %s%s now", resource, where)

    @property
    def available(self) -> frozenset[str]:
        refused = {kind for kind, _ in self.refused}
        return frozenset(k for k, v in self.served.items() if v and k not in refused)

    async def check(self) -> frozenset[str]:
        """The optional kinds served now (asked again only once `seconds` passed since the last time)."""
        if self.checked is not None and time.monotonic() - self.checked <= self.seconds:
            return self.available
        self.checked = time.monotonic()
        before = self.available
        for kind in self.kinds:
            try:
                self.served[kind] = not self.gone(kind) and await self.kube.has_resource(kind)
            except ApiError as exc:
                log.warning("cannot tell whether %ss exist: %s", kind, exc)
        for kind, namespace in sorted(self.refused, key=str):  # allowed by now? (kopf no longer watches them)
            if not self.served[kind]:
                continue
            try:
                await self.kube.list(kind, namespace, None)
            except ApiError:
                continue
            self._refuse(kind, namespace, False)  # told below with the kinds served since the last look
        now = self.available
        if now != before:
            log.info("optional APIs served now: %s (were %s): reconciling every object",
                     ", ".join(sorted(now)) or "none", ", ".join(sorted(before)) or "none")
            if self.rescan is not None:
                for group in sorted({self.kinds[kind].group for kind in now - before}):
                    try:
                        await self.rescan(group)
                    except Exception:  # kopf's own CRD events may still start the watch
                        log.exception("kopf rescan of API group %s failed", group)
            self.on_change(now ^ before)
        return now

    async def run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(max(1.0, self.seconds))
