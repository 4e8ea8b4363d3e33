"""Events posted off the reconcile path: queued, rate-limited per object, aggregated.

A reconcile only ``emit``s; one background task posts. The same event (object, type, reason,
message) again within ``AGGREGATE_SECONDS`` bumps ``count`` and ``lastTimestamp`` of the
Event already posted (client-go's EventCorrelator does the same) instead of a new object.
Each object gets a bucket of ``BURST`` events refilled at one per ``REFILL_SECONDS``
(client-go's spam filter: 25 and 5 minutes); beyond it events are dropped with a log line,
so a hot loop can never flood the API server. An event never fails or delays a reconcile.
One Recorder serves every controller; ``post_event`` and ``bump_event`` are its I/O.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ocr_limits.timestamps import iso

from .kube import Kube
from .workqueue import TokenBucket

log = logging.getLogger(__name__)

AGGREGATE_SECONDS = 600.0
BURST = 25
REFILL_SECONDS = 300.0
QUEUE_LIMIT = 10_000


@dataclass(frozen=True)
class Pending:
    owner: Mapping[str, Any]
    type: str
    reason: str
    message: str
    now: dt.datetime

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.owner["metadata"].get("uid") or "", self.type, self.reason, self.message)


async def post_event(kube: Kube, owner: Mapping[str, Any], type_: str, reason: str, message: str,
                     now: dt.datetime) -> dict[str, Any]:
    """A new core/v1 Event about `owner`, reported by the operator's field manager."""
    md = owner["metadata"]
    stamp = iso(now)
    component = kube.identity.field_manager
    return await kube.create("Event", md["namespace"], {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{md['name']}.", "namespace": md["namespace"]},
        "involvedObject": {"apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": md["name"],
                           "namespace": md["namespace"], "uid": md.get("uid")},
        "type": type_,
        "reason": reason,
        "message": message[:1024],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": os.environ.get("POD_NAME") or socket.gethostname(),
    })


async def bump_event(kube: Kube, namespace: str, name: str, count: int, now: dt.datetime) -> None:
    """The same event again: count and lastTimestamp of the one already posted (aggregation)."""
    await kube.merge_patch("Event", namespace, name, {"count": count, "lastTimestamp": iso(now)})


class Recorder:
    """Queue + one poster task. `post(pending)` and `bump(namespace, name, count, now)` do the I/O;
    `Recorder.to(kube)` posts with `kube`."""

    @classmethod
    def to(cls, kube: Kube, **kwargs: Any) -> "Recorder":
        async def post(item: Pending) -> dict[str, Any]:
            return await post_event(kube, item.owner, item.type, item.reason, item.message, item.now)

        async def bump(namespace: str, name: str, count: int, now: dt.datetime) -> None:
            await bump_event(kube, namespace, name, count, now)

        return cls(post, bump, **kwargs)

    def __init__(self, post: Callable, bump: Callable, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._post, self._bump, self.clock = post, bump, clock
        self.queue: asyncio.Queue[Pending] = asyncio.Queue(QUEUE_LIMIT)
        self.buckets: dict[str, TokenBucket] = {}
        self.seen: dict[tuple[str, str, str, str], tuple[str, int, float]] = {}  # key -> (event name, count, when)
        self.posted = self.aggregated = self.dropped = 0
        self.task: asyncio.Task | None = None

    def emit(self, owner: Mapping[str, Any], type_: str, reason: str, message: str, now: dt.datetime) -> None:
        try:
            self.queue.put_nowait(Pending(owner, type_, reason, message[:1024], now))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event queue full: %s %s dropped", reason, message[:80])

    def allow(self, uid: str) -> bool:
        bucket = self.buckets.get(uid)
        if bucket is None:
            bucket = self.buckets[uid] = TokenBucket(1.0 / REFILL_SECONDS, BURST, self.clock)
        return bucket.delay() == 0.0

    async def handle(self, item: Pending) -> None:
        now = self.clock()
        key = item.key
        earlier = self.seen.get(key)
        if earlier is not None and now - earlier[2] < AGGREGATE_SECONDS:
            name, count, _ = earlier
            md = item.owner["metadata"]
            await self._bump(md["namespace"], name, count + 1, item.now)
            self.seen[key] = (name, count + 1, now)
            self.aggregated += 1
            return
        if not self.allow(key[0]):
            self.dropped += 1
            log.warning("event %s for %s/%s dropped: more than %d events of this object in %.0fs", item.reason,
                        item.owner["metadata"].get("namespace"), item.owner["metadata"].get("name"), BURST,
                        REFILL_SECONDS * BURST)
            return
        posted = await self._post(item)
        self.seen[key] = ((posted or {}).get("metadata", {}).get("name") or "", 1, now)
        self.posted += 1

    async def run(self) -> None:
        while True:
            item = await self.queue.get()
            try:
                await self.handle(item)
            except Exception as exc:  # best effort: an event never stops the operator
                log.warning("event %s for %s not posted: %s", item.reason, item.owner["metadata"].get("name"), exc)
            finally:
                self.queue.task_done()

    def start(self) -> None:
        self.task = asyncio.create_task(self.run(), name="ocr-events")

    async def stop(self, drain_seconds: float = 2.0) -> None:
        if self.task is None:
            return
        try:
            await asyncio.wait_for(self.queue.join(), drain_seconds)
        except asyncio.TimeoutError:
            pass
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def forget(self, uid: str) -> None:
        self.buckets.pop(uid, None)
        for key in [k for k in self.seen if k[0] == uid]:
            del self.seen[key]

