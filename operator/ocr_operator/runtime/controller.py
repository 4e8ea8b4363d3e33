"""The controller core: watch events in, one reconcile per object at a time, events out.

``Runtime`` holds what every controller shares: the REST client, the watch-fed cache of children
and pods (cache.py), the one apply (apply.py), the Event recorder (events.py) and discovery of
optional APIs (discovery.py). A ``Controller`` runs one kind of owner (OcrService, OcrBatch) with
a ``Reconciler`` that knows the domain: kopf's watch streams feed it (async handlers: everything
here runs on the event loop's thread). An owner event stores the newest body and queues its key;
a child or pod event updates the cache and wakes its owner only when it brought news, so the echo
of the operator's own write does not trigger another reconcile. The queue (workqueue.py)
de-duplicates, serves new and changed specs first but fairly, and is rate-limited; a key is never
reconciled by two workers at once. Deadlines are delayed wake-ups, failures back off (timers.py),
slow work runs as background jobs (jobs.py), and Events are posted by a background task, never
inside the reconcile. A status patch that may wait (the reconciler says which) waits until
``status_coalesce`` seconds after the object's previous status write (the whole period when this
process wrote none yet): the reconcile is told how long (``Context.status_hold``) and asks to be
woken then.

``resourceVersion`` is opaque: compared for equality only. Only the operator writes an owner's
status, so after its own status patch the returned body is kept and watch events of the same
generation whose status differs from the one written are skipped (they were sent before the
patch; kopf may coalesce the patch's own event away); one that carries the written status, or a
newer generation, ends the skipping.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from .apply import Applier
from .cache import OWN_WRITE_SECONDS, Store, rv, slim
from .discovery import Discovery
from .events import Recorder
from .jobs import Jobs
from .kinds import ApiKind
from .kube import ApiError, Kube
from .timers import Timers
from .workqueue import WorkQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)


@dataclass
class Result:
    """What one reconcile did and wants."""

    requeue_after: float | None = None
    writes: int = 0
    actions: list[str] = field(default_factory=list)
    status: dict[str, Any] | None = None  # the owner as its status patch returned it
    status_held: bool = False  # a status patch that may wait was held back (Context.status_hold)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message) to post


@dataclass(frozen=True)
class Context:
    """What a reconcile is given besides the owner and the runtime."""

    now: dt.datetime
    available: frozenset[str] = frozenset()  # the optional kinds the API serves now
    status_hold: float = 0.0  # how long a status patch that may wait should wait (0: write now)
    jobs: Jobs | None = None  # the controller's background jobs


class Reconciler(Protocol):
    """The domain's part of a controller."""

    kind: ApiKind  # the owner's kind

    async def reconcile(self, owner: Mapping[str, Any], ctx: Context) -> Result:
        """One level-based, idempotent reconcile: snapshot -> decide -> plan -> apply -> status."""

    def owner_of(self, obj: Mapping[str, Any]) -> Key | None:
        """The owner a child or pod event is about (from its labels), or None."""

    def forgotten(self, key: Key, last: Mapping[str, Any], jobs: Jobs) -> None:
        """The owner is gone (`last`: its body as last known); drop what the domain keeps of it
        (`jobs`: the controller's, for work about the owner that must still be done)."""


class Observer(Protocol):
    def reconciled(self, seconds: float) -> None: ...

    def failed(self, kind: str, seconds: float) -> None: ...


class Runtime:
    """What every controller shares. `namespaces`: the watched ones (None: all)."""

    def __init__(self, kube: Kube, store: Store, *, namespaces: list[str] | None = None,
                 discovery: Discovery | None = None) -> None:
        self.kube, self.store = kube, store
        self.applier = Applier(kube, store)
        self.recorder = Recorder.to(kube)
        self.namespaces = namespaces
        self.discovery = discovery
        self.controllers: list[Controller] = []
        self.tasks: list[asyncio.Task] = []
        self.child_events = 0
        self.child_wakes = 0

    def child_event(self, kind: str, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """A child or pod event: update the cache; wake the owner if it brought news."""
        self.child_events += 1
        obj = obj if obj.get("kind") == kind else {**obj, "kind": kind}
        if self.store.apply_event(event_type, obj):
            for controller in self.controllers:
                if controller.wake_owner(obj):
                    self.child_wakes += 1

    def optional_changed(self, kinds: frozenset[str]) -> None:
        """Optional APIs appeared or went: forget what the cache held of them (read again on the
        next miss), reconcile every object."""
        for kind in kinds:
            self.store.drop_kind(kind)
        for controller in self.controllers:
            controller.wake_all()

    def crd_event(self, event_type: str | None, crd: Mapping[str, Any]) -> None:
        """A CustomResourceDefinition event: an optional kind whose CRD was deleted or replaced
        is forgotten and every object reconciled (discovery.Discovery.crd_event)."""
        kind = self.discovery.crd_event(event_type, crd) if self.discovery is not None else None
        if kind is not None:
            log.info("the CRD of %ss was deleted or replaced: forgetting their cached objects", kind)
            self.optional_changed(frozenset({kind}))

    async def read(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        """An object from the cache, or on a miss (a namespace it could not list) one GET, remembered.
        Someone else's object of a kind watched by label is returned but not remembered."""
        key = (kind, namespace, name)
        if self.store.known(key):
            return self.store.get(key)
        found = await self.kube.get(kind, namespace, name)
        self.store.fetched(key, found)
        return self.store.get(key) if self.store.known(key) else found

    async def available(self) -> frozenset[str]:
        return await self.discovery.check() if self.discovery is not None else frozenset()

    async def prime(self) -> None:
        """List every watched kind once, before kopf's watches start, so a cache miss means
        absent: owned kinds unfiltered (every taken name), others by the managed-by label.
        Namespaces given as glob patterns cannot be listed and fall back to one GET per miss."""
        scopes: list[str | None] = [None] if not self.namespaces else [
            ns for ns in self.namespaces if not any(ch in ns for ch in "*?[]!")]
        selector = self.kube.identity.selector

        async def one(kind: ApiKind, ns: str | None) -> None:
            try:
                items = await self.kube.list(kind.kind, ns, None if kind.owned else selector)
            except ApiError as exc:  # e.g. no ServiceMonitor CRD, or no list right cluster-wide
                log.info("not priming the %s cache in %s: %s", kind.kind, ns or "all namespaces", exc)
                if exc.status == 403 and self.discovery is not None:
                    self.discovery.permitted(kind.resource, ns, False)
                return
            self.store.mark_listed(kind.kind, ns, items)

        await asyncio.gather(*(one(k, ns) for k in self.store.kinds if k.watched for ns in scopes))

    async def start(self) -> None:
        await self.prime()
        self.recorder.start()
        for controller in self.controllers:
            controller.start()
        if self.discovery is not None:
            self.tasks.append(asyncio.create_task(self.discovery.run(), name="ocr-discovery"))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for controller in self.controllers:
            await controller.stop()
        await self.recorder.stop()
        await self.kube.close()


class Controller:
    """One kind of owner on the runtime."""

    def __init__(self, runtime: Runtime, reconciler: Reconciler, *, workers: int = 8, qps: float = 0.0,
                 burst: int | None = None, status_coalesce: float = 0.0, max_backoff: float = 60.0,
                 observer: Observer | None = None) -> None:
        self.runtime, self.reconciler = runtime, reconciler
        self.kind = reconciler.kind
        self.workers = workers
        self.status_coalesce = status_coalesce
        self.observer = observer
        self.cache: dict[Key, dict[str, Any]] = {}
        self.own: dict[Key, tuple[dict[str, Any], float]] = {}  # our last status write, until seen
        self.status_written: dict[Key, float] = {}  # monotonic time of our last status write
        self.queue: WorkQueue[Key] = WorkQueue(qps=qps, burst=burst if burst is not None else max(1, int(2 * qps)))
        self.timers: Timers[Key] = Timers(self._due, max_backoff=max_backoff)
        self.jobs: Jobs[Key, Any] = Jobs(self._job_done, name=f"{self.kind.plural}-job")
        self.tasks: list[asyncio.Task] = []
        self.reconciles = 0
        self.writes = 0
        runtime.controllers.append(self)

    @property
    def kube(self) -> Kube:
        return self.runtime.kube

    @property
    def store(self) -> Store:
        return self.runtime.store

    @property
    def recorder(self) -> Recorder:
        return self.runtime.recorder

    # ------------------------------------------------------------------ feeding
    def owner_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An owner event from the watch stream: keep the newest body, wake its reconcile."""
        md = obj.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "")
        cached = self.cache.get(key)
        same_uid = cached is not None and cached["metadata"].get("uid") == md.get("uid")
        if event_type == "DELETED":
            self.forget(key, cached if same_uid else obj)
            return
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

    def wake_owner(self, child: Mapping[str, Any]) -> bool:
        """Queue the owner `child` belongs to, if it is one of ours; whether it was."""
        key = self.reconciler.owner_of(child)
        if key is not None and key in self.cache:
            self.enqueue(key)
            return True
        return False

    def wake_all(self) -> None:
        for key in list(self.cache):
            self.enqueue(key)

    def forget(self, key: Key, last: Mapping[str, Any] | None = None) -> None:
        owner = self.cache.pop(key, None)
        self.own.pop(key, None)
        self.status_written.pop(key, None)
        self.queue.forget(key)
        self.timers.forget(key)
        self.jobs.drop(key)
        if owner is not None:  # (a repeated deletion is no news)
            last = last if last is not None else owner
            self.reconciler.forgotten(key, last, self.jobs)
            self.recorder.forget((last.get("metadata") or {}).get("uid") or "")

    def enqueue(self, key: Key, *, urgent: bool = False, later: bool = False) -> None:
        self.queue.add(key, urgent=urgent, later=later)

    def enqueue_after(self, key: Key, delay: float) -> None:
        """Wake `key` in `delay` seconds (the earliest pending wake-up is kept)."""
        self.timers.after(key, delay)

    def _due(self, key: Key) -> None:
        if key in self.cache:
            self.enqueue(key, later=True)  # a timer: after child events and new specs (workqueue.py)

    def _job_done(self, key: Key) -> None:
        if key in self.cache:
            self.enqueue(key, urgent=True)

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.queue.serve(self._run), name=f"ocr-{self.kind.plural}-{i}")
                      for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.timers.cancel_all()
        await self.jobs.stop()

    async def _run(self, key: Key) -> None:
        owner = self.cache.get(key)
        if owner is None:
            return
        started = time.monotonic()
        written = self.status_written.get(key)
        # Never written by this process (a new object, or since a restart): a patch that may wait
        # waits the whole coalescing period (a new object's first report: ocrservice/status.py).
        hold = self.status_coalesce if written is None else max(0.0, self.status_coalesce - (started - written))
        try:
            ctx = Context(now=dt.datetime.now(dt.timezone.utc), available=await self.runtime.available(),
                          status_hold=hold, jobs=self.jobs)
            result = await self.reconciler.reconcile(owner, ctx)
        except Exception as exc:  # an API error, or a bug: it must not kill the worker; retry with backoff
            kind = "api" if isinstance(exc, ApiError) else "unexpected"
            if self.observer is not None:
                self.observer.failed(kind, time.monotonic() - started)
            delay = self.timers.failed(key)
            if kind == "api":
                log.warning("reconcile of %s %s/%s: API error: %s; retrying in %.1fs", self.kind.kind, *key, exc, delay)
            else:
                log.exception("reconcile of %s %s/%s failed; retrying in %.1fs", self.kind.kind, *key, delay)
            return
        if self.observer is not None:
            self.observer.reconciled(time.monotonic() - started)
        self.reconciles += 1
        self.writes += result.writes
        self.timers.succeeded(key)
        if result.status is not None:
            self.status_written[key] = time.monotonic()
            if key in self.cache:
                self._store_own_status(key, owner, result.status)
        now = dt.datetime.now(dt.timezone.utc)
        for type_, reason, message in result.events:
            self.recorder.emit(owner, type_, reason, message, now)
        if result.writes:
            log.info("reconciled %s %s/%s in %.2fs: %d write(s) %s", self.kind.kind, *key, time.monotonic() - started,
                     result.writes, "; ".join(result.actions))
        else:
            log.debug("reconciled %s %s/%s: no change", self.kind.kind, *key)
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
