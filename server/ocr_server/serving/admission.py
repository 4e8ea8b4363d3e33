"""Admission control: at most CONCURRENCY requests inside the engine (decode, crop, generate); at
most QUEUE_SIZE more wait for a slot; beyond that 429 with Retry-After. Waiting past the deadline: 504.
Waiting interactive requests get a freed slot before batch ones, batch requests hold at most
BATCH_MAX_RUNNING slots, and a batch request is shed (429) once BATCH_QUEUE_THRESHOLD requests wait
(engines/scheduling.py). `admit` is the pure decision, `Admission` applies it.
"""

from __future__ import annotations

import asyncio
import math
import time
from contextlib import asynccontextmanager
from enum import Enum
from typing import AsyncIterator

from ocr_limits.request_classes import BATCH, CLASSES, INTERACTIVE

from ..engines.scheduling import ClassQueue
from ..runtime.errors import DeadlineExceeded, QueueFull
from ..runtime.metrics import Metrics


class Decision(Enum):
    RUN = "run"  # a slot is free: in at once
    WAIT = "wait"  # queue for the next slot
    SHED = "shed"  # 429 with Retry-After


def admit(request_class: str, *, free: int, waiting: int, queue_size: int, batch_threshold: int,
          batch_running: int = 0, batch_max_running: int | None = None) -> Decision:
    """What admission does with a new request, given the free slots, the requests already waiting
    (both classes) and the batch requests running: batch traffic runs only below batch_max_running
    and stops queueing at batch_threshold, interactive traffic queues up to queue_size."""
    under_cap = batch_max_running is None or batch_running < batch_max_running
    if free > 0 and (request_class != BATCH or under_cap):
        return Decision.RUN
    limit = batch_threshold if request_class == BATCH else queue_size
    return Decision.WAIT if waiting < limit else Decision.SHED


class Admission:
    """CONCURRENCY slots; waiting requests queue by class and take a freed slot
    interactive first. Batch requests hold at most `batch_max_running` slots, so the rest are there
    for interactive ones. A freed slot is handed straight to the next waiter it may go to, so a
    newcomer never overtakes the queue."""

    def __init__(self, concurrency: int, queue_size: int, metrics: Metrics, batch_threshold: int | None = None,
                 batch_max_running: int | None = None) -> None:
        self.concurrency, self.queue_size, self.metrics = concurrency, queue_size, metrics
        self.batch_threshold = queue_size if batch_threshold is None else batch_threshold
        self.batch_max_running = concurrency if batch_max_running is None else min(batch_max_running, concurrency)
        self.free = concurrency
        self.running = {INTERACTIVE: 0, BATCH: 0}  # slots granted, by class (a granted waiter included)
        self._no_interactive = asyncio.Event()  # set while no interactive request holds a slot
        self._no_interactive.set()
        self._waiters: ClassQueue[asyncio.Future] = ClassQueue()
        self.inside = 0
        self._avg_latency = 2.0  # seconds, EWMA of time inside the engine; feeds Retry-After

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def interactive_inside(self) -> bool:
        """Whether an interactive request holds a slot (read from the engine thread: one int)."""
        return self.running[INTERACTIVE] > 0

    async def yield_to_interactive(self, most: float) -> None:
        """Wait (at most `most` seconds) until no interactive request is inside: a batch request
        calls it before reading its document, so that it takes no CPU from a person waiting."""
        if self.interactive_inside() and most > 0:
            try:
                await asyncio.wait_for(self._no_interactive.wait(), most)
            except TimeoutError:
                pass

    def retry_after(self) -> int:
        return max(1, math.ceil(self._avg_latency * (self.waiting + self.inside) / self.concurrency))

    def _shed(self, request_class: str) -> QueueFull:
        self.metrics.shed.labels(request_class).inc()
        busy = f"{self.inside} requests running, {self.waiting} waiting"
        if request_class == BATCH and self.waiting < self.queue_size:
            return QueueFull(f"batch requests are shed while {self.waiting} requests wait (BATCH_QUEUE_THRESHOLD="
                             f"{self.batch_threshold}); {busy}; retry later", retry_after=self.retry_after())
        return QueueFull(f"the server is at capacity ({busy}); retry later", retry_after=self.retry_after())

    def _grant(self, request_class: str) -> None:
        self.free -= 1
        self.running[request_class] += 1
        if request_class == INTERACTIVE:
            self._no_interactive.clear()

    def _release(self, request_class: str) -> None:
        """Give a slot back and hand free slots to the waiters they may go to."""
        self.free += 1
        self.running[request_class] -= 1
        if not self.running[INTERACTIVE]:
            self._no_interactive.set()
        self._dispatch()

    def _dispatch(self) -> None:
        while self.free > 0 and (waiter := self._next_waiter()) is not None:
            future, request_class = waiter
            self._grant(request_class)
            future.set_result(None)

    def _next_waiter(self) -> tuple[asyncio.Future, str] | None:
        """The first live waiter of the first class that may take a slot: interactive, then batch
        while it holds fewer than batch_max_running."""
        for request_class in CLASSES:
            if request_class == BATCH and self.running[BATCH] >= self.batch_max_running:
                continue
            while self._waiters.count(request_class):
                future = self._waiters.popleft_of(request_class)
                if not future.done():
                    return future, request_class
        return None

    async def _wait(self, deadline: float, request_class: str) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter, request_class)
        self.metrics.queue_depth.inc()
        self.metrics.queued.labels(request_class).inc()
        admitted = False
        try:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded("the request deadline passed while waiting for the engine")
            async with asyncio.timeout(remaining):
                await waiter
            admitted = True
        except TimeoutError:
            raise DeadlineExceeded("the request deadline passed while waiting for the engine") from None
        finally:
            self._waiters.remove(waiter, request_class)
            self.metrics.queue_depth.dec()
            self.metrics.queued.labels(request_class).dec()
            if not admitted and waiter.done() and not waiter.cancelled():
                self._release(request_class)  # the slot was handed over as this request gave up: pass it on

    @asynccontextmanager
    async def slot(self, deadline: float, request_class: str = INTERACTIVE) -> AsyncIterator[None]:
        arrived = time.monotonic()
        decision = admit(request_class, free=self.free, waiting=self.waiting, queue_size=self.queue_size,
                         batch_threshold=self.batch_threshold, batch_running=self.running[BATCH],
                         batch_max_running=self.batch_max_running)
        if decision is Decision.SHED:
            raise self._shed(request_class)
        if decision is Decision.RUN:
            self._grant(request_class)  # a free slot: taken at once, never counted as waiting
        else:
            await self._wait(deadline, request_class)
        self.metrics.queue_wait.labels(request_class).observe(time.monotonic() - arrived)
        self.inside += 1
        self.metrics.in_flight.inc()
        start = time.monotonic()
        try:
            yield
        finally:
            self._avg_latency = 0.8 * self._avg_latency + 0.2 * (time.monotonic() - start)
            self.inside -= 1
            self.metrics.in_flight.dec()
            self._release(request_class)
