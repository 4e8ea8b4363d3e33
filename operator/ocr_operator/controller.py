"""The controller core: watch events in, one reconcile per object at a time, events out.

kopf's watch streams feed it (handlers.py, async handlers: everything here runs on the event
loop's thread). An OcrService event stores the newest body and queues its key; a child or pod
event updates the child cache (cache.py) and wakes the owner only when it brought news, so the
echo of the operator's own write does not trigger another reconcile. The queue (workqueue.py)
de-duplicates, serves new and changed specs first but fairly, and is rate-limited; a key is
never reconciled by two workers at once. Deadlines (settle/startup/progress, schedules,
resync) are delayed wake-ups, failures back off exponentially, Events are posted by a
background task (events.py), never inside the reconcile. A status patch that changes only
counts, reasons and messages (status.urgent) waits until STATUS_COALESCE_SECONDS after the
object's previous status write and goes out with what comes next (a delayed wake-up writes it
otherwise); a condition's status, the rollout record and the revisions are written at once.

``resourceVersion`` is opaque: compared for equality only. Only the operator writes an
OcrService's status, so after its own status patch the returned body is kept and watch events
of the same generation whose status differs from the one written are skipped (they were sent
before the patch; kopf may coalesce the patch's own event away); one that carries the written
status, or a newer generation, ends the skipping.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time
from typing import Any, Awaitable, Callable, Mapping

from . import children, naming, status
from .cache import OWN_WRITE_SECONDS, Store, rv, slim
from .events import Recorder
from .gaterun import GateRunner
from .kube import ApiError, Kube
from .metrics import METRICS
from .reconcile import reconcile
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]

# How often to look again whether optional APIs (ServiceMonitor, PrometheusRule) are served.
DISCOVERY_SECONDS = float(os.environ.get("OCR_OPERATOR_DISCOVERY_SECONDS", "60"))
# Reconciles handed out per second (burst twice that); 0 = unlimited.
QPS = float(os.environ.get("OCR_OPERATOR_QPS", "100"))
# A status patch of counts and messages only (status.urgent) waits until this long after the
# object's previous status write; conditions, phase and revisions are written at once. 0 = never wait.
STATUS_COALESCE_SECONDS = float(os.environ.get("OCR_OPERATOR_STATUS_COALESCE_SECONDS", "2"))


class Controller:
    def __init__(self, kube: Kube, *, workers: int = 8, max_backoff: float = 60.0, qps: float = QPS,
                 namespaces: list[str] | None = None, status_coalesce: float = STATUS_COALESCE_SECONDS,
                 rescan: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.kube = kube
        # Asks kopf to rescan an API group (rescan.py): kopf may miss an optional API that appears later.
        self.rescan = rescan
        self.workers = workers
        self.max_backoff = max_backoff
        self.namespaces = namespaces  # None: every namespace
        self.cache: dict[Key, dict[str, Any]] = {}
        self.own: dict[Key, tuple[dict[str, Any], float]] = {}  # our last status write, until seen
        self.status_coalesce = status_coalesce
        self.status_written: dict[Key, float] = {}  # monotonic time of our last status write
        self.store = Store()
        self.queue: WorkQueue[Key] = WorkQueue(qps=qps, burst=max(1, int(2 * qps)))
        self.recorder = Recorder(self._post_event, self._bump_event)
        # The quality gate's jobs (gaterun.py): a finished one wakes its OcrService.
        self.gates = GateRunner(self._gate_done)
        self.timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}
        self.failures: dict[Key, int] = {}
        self.tasks: list[asyncio.Task] = []
        # Optional child kinds (children.optional_kinds) -> whether the API serves them now.
        self.optional_available: dict[str, bool] = {kind: False for kind in children.optional_kinds()}
        self._optional_checked = 0.0
        self.reconciles = 0
        self.writes = 0
        self.child_events = 0
        self.child_wakes = 0

    @property
    def queued(self) -> dict[Key, str]:
        return self.queue.waiting

    # ------------------------------------------------------------------ feeding
    def ocrservice_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An OcrService event from the watch stream: keep the newest body, wake its reconcile."""
        md = obj.get("metadata") or {}
        key = (md.get("namespace"), md.get("name"))
        if event_type == "DELETED":
            self.forget(key)
            return
        cached = self.cache.get(key)
        same_uid = cached is not None and cached["metadata"].get("uid") == md.get("uid")
        if same_uid and rv(obj) is not None and rv(obj) == rv(cached):
            return  # the echo of our own status patch, or a re-list of what we hold
        own = self.own.get(key)
        if (same_uid and own is not None and event_type is not None
                and time.monotonic() - own[1] < OWN_WRITE_SECONDS
                and md.get("generation") == own[0].get("metadata", {}).get("generation")
                and obj.get("status") != own[0].get("status")):
            return  # sent before our own status patch: we hold a newer body
        self.own.pop(key, None)
        spec_changed = cached is None or not same_uid or (cached["metadata"].get("generation")
                                                          != md.get("generation"))
        self.cache[key] = slim(obj)
        self.enqueue(key, urgent=spec_changed)

    def child_event(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A child or pod event: update the cache; wake the owner if it brought news."""
        self.child_events += 1
        obj = obj if obj.get("kind") == kind else {**obj, "kind": kind}
        if self.store.apply_event(event_type, obj):
            self.wake_owner(obj)

    def wake_owner(self, child: Mapping[str, Any]) -> None:
        md = child.get("metadata") or {}
        owner = (md.get("labels") or {}).get(naming.LABEL_INSTANCE)
        key = (md.get("namespace"), owner)
        if owner and key in self.cache:
            self.child_wakes += 1
            self.enqueue(key)

    def forget(self, key: Key) -> None:
        owner = self.cache.pop(key, None)
        self.own.pop(key, None)
        self.status_written.pop(key, None)
        self.failures.pop(key, None)
        self.queue.forget(key)
        self.gates.drop(key)
        timer = self.timers.pop(key, None)
        if timer:
            timer[1].cancel()
        if key[0] and key[1]:
            kinds = {c.key: c.kind for c in children.CHILDREN}
            self.store.forget(key[0], key[1], children.child_names(key[1]), kinds)
        if owner is not None:
            self.recorder.forget(owner["metadata"].get("uid") or "")

    def enqueue(self, key: Key, *, urgent: bool = False) -> None:
        self.queue.add(key, urgent=urgent)

    def _gate_done(self, key: Key) -> None:
        if key in self.cache:
            self.enqueue(key, urgent=True)

    def enqueue_after(self, key: Key, delay: float) -> None:
        """Wake `key` in `delay` seconds (keeps the earliest pending wake-up)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        pending = self.timers.get(key)
        if pending and pending[0] <= when:
            return
        if pending:
            pending[1].cancel()
        self.timers[key] = (when, loop.call_at(when, self._fire, key))

    def _fire(self, key: Key) -> None:
        self.timers.pop(key, None)
        if key in self.cache:
            self.enqueue(key)

    # ------------------------------------------------------------------ running
    async def prime(self) -> None:
        """List every watched kind once (label-filtered) so a cache miss means absent.

        Runs before kopf's watches start; namespaces given as glob patterns cannot be listed
        and fall back to one GET per missing child."""
        scopes: list[str | None] = [None] if not self.namespaces else [
            ns for ns in self.namespaces if not any(ch in ns for ch in "*?[]!")]
        selector = f"{naming.LABEL_MANAGED_BY}={naming.FIELD_MANAGER}"

        async def one(kind: children.ApiKind, ns: str | None) -> None:
            try:
                items = await self.kube.list(kind.kind, ns, selector)
            except ApiError as exc:  # e.g. no ServiceMonitor CRD, or no list right cluster-wide
                log.info("not priming the %s cache in %s: %s", kind.kind, ns or "all namespaces", exc)
                return
            self.store.mark_listed(kind.kind, ns, items)

        await asyncio.gather(*(one(k, ns) for k in children.watched() for ns in scopes))

    async def start(self) -> None:
        await self.prime()
        self.recorder.start()
        self.tasks = [asyncio.create_task(self.queue.serve(self._run), name=f"ocr-reconcile-{i}")
                      for i in range(self.workers)]
        self.tasks.append(asyncio.create_task(self._discovery(), name="ocr-discovery"))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for _, handle in self.timers.values():
            handle.cancel()
        await self.gates.stop()
        await self.recorder.stop()
        await self.kube.close()

    @property
    def servicemonitor_available(self) -> bool:
        return self.optional_available.get("ServiceMonitor", False)

    async def _optional_apis(self) -> frozenset[str]:
        """The optional kinds the API serves (CRDs such as prometheus-operator's), re-checked
        every DISCOVERY_SECONDS."""
        if time.monotonic() - self._optional_checked > DISCOVERY_SECONDS:
            self._optional_checked = time.monotonic()
            for kind, before in list(self.optional_available.items()):
                try:
                    available = await self.kube.has_resource(kind)
                except ApiError as exc:
                    log.warning("cannot tell whether %ss exist: %s", kind, exc)
                    continue
                if available != before:
                    self.store.listed.discard((kind, None))
                self.optional_available[kind] = available
        return frozenset(k for k, v in self.optional_available.items() if v)

    async def _discovery(self) -> None:
        """When an optional API appears or goes, every object is reconciled (not only at resync)."""
        while True:
            before = frozenset(k for k, v in self.optional_available.items() if v)
            now = await self._optional_apis()
            if now != before:
                log.info("optional APIs served now: %s (were %s): reconciling every object",
                         ", ".join(sorted(now)) or "none", ", ".join(sorted(before)) or "none")
                if self.rescan is not None:
                    for group in sorted({children.KINDS[kind].group for kind in now - before}):
                        try:
                            await self.rescan(group)
                        except Exception:  # kopf's own CRD events may still start the watch
                            log.exception("kopf rescan of API group %s failed", group)
                for key in list(self.cache):
                    self.enqueue(key)
            await asyncio.sleep(max(1.0, DISCOVERY_SECONDS))

    async def _run(self, key: Key) -> None:
        owner = self.cache.get(key)
        if owner is None:
            return
        started = time.monotonic()
        written = self.status_written.get(key)
        hold = 0.0 if written is None else max(0.0, self.status_coalesce - (started - written))
        try:
            result = await reconcile(self.kube, owner, now=dt.datetime.now(dt.timezone.utc),
                                     available=await self._optional_apis(), store=self.store, status_hold=hold,
                                     gates=self.gates)
        except ApiError as exc:
            METRICS.failed("api", time.monotonic() - started)
            self._backoff(key, f"API error: {exc}")
            return
        except Exception:  # a bug must not kill the worker; retry later with backoff
            METRICS.failed("unexpected", time.monotonic() - started)
            log.exception("reconcile of %s/%s failed", *key)
            self._backoff(key, "unexpected error")
            return
        METRICS.reconciled(time.monotonic() - started)
        self.reconciles += 1
        self.writes += result.writes
        self.failures.pop(key, None)
        if result.status is not None:
            self.status_written[key] = time.monotonic()
        if result.status is not None and key in self.cache:
            self._store_own_status(key, owner, result.status)
        now = dt.datetime.now(dt.timezone.utc)
        for type_, reason, message in result.events:
            self.recorder.emit(owner, type_, reason, message, now)
            if reason == "RolledBack":
                METRICS.rolled_back(((result.status or owner).get("status") or {}).get("failedReason"))
        if result.writes:
            log.info("reconciled %s/%s in %.2fs: %d write(s) %s", *key, time.monotonic() - started, result.writes,
                     "; ".join(result.actions))
        else:
            log.debug("reconciled %s/%s: no change", *key)
        if result.requeue_after is not None:
            self.enqueue_after(key, result.requeue_after)

    def _store_own_status(self, key: Key, owner: Mapping[str, Any], patched: dict[str, Any]) -> None:
        """Keep what our status patch returned, unless the watch already delivered this state or
        a later one (a slow response can come after the events that followed it)."""
        current = self.cache[key]
        gen = patched["metadata"].get("generation") or 0
        if (current["metadata"].get("generation") or 0) > gen:
            self.enqueue(key, urgent=True)  # a newer spec arrived meanwhile: keep it, reconcile it
            return
        if current.get("status") != patched.get("status"):
            patched = slim(patched)
            self.cache[key] = patched
            self.own[key] = (patched, time.monotonic())
        if gen != owner["metadata"].get("generation"):
            self.enqueue(key, urgent=True)  # the spec changed while we reconciled

    def _backoff(self, key: Key, why: str) -> None:
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        delay = min(self.max_backoff, 0.5 * 2 ** (n - 1))
        log.warning("reconcile of %s/%s: %s; retrying in %.1fs", *key, why, delay)
        self.enqueue_after(key, delay)

    # ------------------------------------------------------------------ events I/O
    async def _post_event(self, item) -> dict[str, Any]:
        return await status.post_event(self.kube, item.owner, item.type, item.reason, item.message, item.now)

    async def _bump_event(self, namespace: str, name: str, count: int, now: dt.datetime) -> None:
        await status.bump_event(self.kube, namespace, name, count, now)
