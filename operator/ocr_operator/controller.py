"""Work queue of OcrService keys: coalesced wake-ups, one reconcile per object at a time.

kopf's watch streams feed it (handlers.py): every event of an OcrService or of one of its
children only *wakes* the owner's reconcile; the reconcile reads everything itself. A key is
never reconciled by two workers at once (the per-object lock), wake-ups that arrive meanwhile
coalesce into one more run, and deadlines (rollout settle/startup/progress, schedules, resync)
are delayed wake-ups rather than polling. Failures back off exponentially.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import time
from typing import Any, Mapping

from .kube import ApiError, Kube
from .reconcile import reconcile

log = logging.getLogger(__name__)

Key = tuple[str, str]

# How often to look again whether optional APIs (ServiceMonitor) are served.
DISCOVERY_SECONDS = float(os.environ.get("OCR_OPERATOR_DISCOVERY_SECONDS", "60"))


def _rv(obj: Mapping[str, Any] | None) -> int:
    try:
        return int((obj or {}).get("metadata", {}).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return 0


class Controller:
    def __init__(self, kube: Kube, *, workers: int = 8, max_backoff: float = 60.0) -> None:
        self.kube = kube
        self.workers = workers
        self.max_backoff = max_backoff
        self.cache: dict[Key, dict[str, Any]] = {}
        self.queue: asyncio.Queue[Key] = asyncio.Queue()
        self.queued: set[Key] = set()
        self.active: set[Key] = set()
        self.dirty: set[Key] = set()
        self.timers: dict[Key, tuple[float, asyncio.TimerHandle]] = {}
        self.failures: dict[Key, int] = {}
        self.tasks: list[asyncio.Task] = []
        self.servicemonitor_available = False
        self._sm_checked = 0.0
        self.reconciles = 0
        self.writes = 0

    # ------------------------------------------------------------------ feeding
    def observe(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        """An OcrService event from the watch stream: keep the newest body, wake its reconcile."""
        md = obj.get("metadata") or {}
        key = (md.get("namespace"), md.get("name"))
        if event_type == "DELETED":
            self.forget(key)
            return
        cached = self.cache.get(key)
        if cached is not None and cached["metadata"].get("uid") == md.get("uid") and _rv(obj) <= _rv(cached):
            return  # not newer than what a status patch already told us
        self.cache[key] = dict(obj)
        self.enqueue(key)

    def wake_owner(self, child: Mapping[str, Any]) -> None:
        md = child.get("metadata") or {}
        owner = (md.get("labels") or {}).get("app.kubernetes.io/instance")
        key = (md.get("namespace"), owner)
        if owner and key in self.cache:
            self.enqueue(key)

    def forget(self, key: Key) -> None:
        self.cache.pop(key, None)
        self.failures.pop(key, None)
        timer = self.timers.pop(key, None)
        if timer:
            timer[1].cancel()

    def enqueue(self, key: Key) -> None:
        if key in self.active:
            self.dirty.add(key)
        elif key not in self.queued:
            self.queued.add(key)
            self.queue.put_nowait(key)

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
    async def start(self) -> None:
        self.tasks = [asyncio.create_task(self._worker(i), name=f"ocr-reconcile-{i}") for i in range(self.workers)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for _, handle in self.timers.values():
            handle.cancel()
        await self.kube.close()

    async def _servicemonitors(self) -> bool:
        """Whether the ServiceMonitor API is served, re-checked every DISCOVERY_SECONDS."""
        if time.monotonic() - self._sm_checked > DISCOVERY_SECONDS:
            self._sm_checked = time.monotonic()
            try:
                self.servicemonitor_available = await self.kube.has_resource("ServiceMonitor")
            except ApiError as exc:
                log.warning("cannot tell whether ServiceMonitors exist: %s", exc)
        return self.servicemonitor_available

    async def _worker(self, index: int) -> None:
        while True:
            key = await self.queue.get()
            self.queued.discard(key)
            self.active.add(key)
            try:
                await self._run(key)
            finally:
                self.active.discard(key)
                if key in self.dirty:
                    self.dirty.discard(key)
                    self.enqueue(key)
                self.queue.task_done()

    async def _run(self, key: Key) -> None:
        owner = self.cache.get(key)
        if owner is None:
            return
        started = time.monotonic()
        try:
            result = await reconcile(self.kube, owner, now=dt.datetime.now(dt.timezone.utc),
                                     servicemonitor_available=await self._servicemonitors())
        except ApiError as exc:
            self._backoff(key, f"API error: {exc}")
            return
        except Exception:  # a bug must not kill the worker; retry later with backoff
            log.exception("reconcile of %s/%s failed", *key)
            self._backoff(key, "unexpected error")
            return
        self.reconciles += 1
        self.writes += result.writes
        self.failures.pop(key, None)
        if result.status is not None and key in self.cache:
            if _rv(result.status) >= _rv(self.cache[key]):
                self.cache[key] = result.status
        if result.writes:
            log.info("reconciled %s/%s in %.2fs: %d write(s) %s", *key, time.monotonic() - started, result.writes,
                     "; ".join(result.actions))
        else:
            log.debug("reconciled %s/%s: no change", *key)
        if result.requeue_after is not None:
            self.enqueue_after(key, result.requeue_after)

    def _backoff(self, key: Key, why: str) -> None:
        n = self.failures.get(key, 0) + 1
        self.failures[key] = n
        delay = min(self.max_backoff, 0.5 * 2 ** (n - 1))
        log.warning("reconcile of %s/%s: %s; retrying in %.1fs", *key, why, delay)
        self.enqueue_after(key, delay)
