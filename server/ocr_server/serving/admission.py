"""Admission control and dynamic batching.

Admission: at most CONCURRENCY requests inside the engine (decode, crop, generate); at most
QUEUE_SIZE more wait for a slot; beyond that 429 with Retry-After. Waiting past the deadline: 504.
Waiting interactive requests get a freed slot before batch ones, batch requests hold at most
BATCH_MAX_RUNNING slots, and a batch request is shed (429) once BATCH_QUEUE_THRESHOLD requests wait
(priority.py).

Batching (after Ray Serve's _BatchQueue): one future per page; one task takes the first waiting
page (interactive pages before batch ones), then more until BATCH_SIZE or the wait window closes, drops pages whose request expired or
was cancelled (no GPU time for them), and runs one `generate` in the single engine thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from .errors import DeadlineExceeded, EngineFailure, QueueFull
from .liveness import ProgressClock
from .metrics import Metrics
from .priority import BATCH, CLASSES, INTERACTIVE, ClassQueue, Decision, admit, rank

log = logging.getLogger("ocr_server.batching")


class Admission:
    """CONCURRENCY slots; waiting requests queue by class (priority.py) and take a freed slot
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


@dataclass
class _Pending:
    item: Any  # engine.Prepared: deadline, cancelled
    future: asyncio.Future


class Batcher:
    def __init__(
        self,
        run_batch: Callable[[list[Any]], list[Any]],
        *,
        batch_size: int,
        wait_s: float,
        metrics: Metrics,
        on_fatal: Callable[[BaseException], None],
    ) -> None:
        self.run_batch, self.batch_size, self.wait_s = run_batch, batch_size, wait_s
        self.metrics, self.on_fatal = metrics, on_fatal
        # (class rank, arrival, page): interactive pages first, then first come, first served
        self.queue: asyncio.PriorityQueue[tuple[int, int, _Pending]] = asyncio.PriorityQueue()
        self._arrivals = itertools.count()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._task: asyncio.Task | None = None
        self.progress = ProgressClock()

    def stalled_for(self) -> float:
        """Seconds the engine has owed work without progress (liveness.py); 0 when idle."""
        return self.progress.stalled_for(self.queue.qsize())

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, item: Any) -> Any:
        """Queue one page; the result is its Generated, or DeadlineExceeded/EngineFailure."""
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if nobody awaits
        self.progress.work_arrived(was_idle=self.queue.empty() and not self.progress.running)
        request_class = getattr(item, "request_class", INTERACTIVE)
        self.queue.put_nowait((rank(request_class), next(self._arrivals), _Pending(item, fut)))
        self.metrics.queue_depth.inc()
        try:
            remaining = item.deadline - time.monotonic()
            return await asyncio.wait_for(asyncio.shield(fut), max(remaining, 0.0))
        except TimeoutError:
            item.cancelled.set()  # a running generate stops this row at its next step
            raise DeadlineExceeded("the request deadline passed during generation") from None
        finally:
            if not fut.done():
                item.cancelled.set()

    async def _collect(self) -> list[_Pending]:
        *_, first = await self.queue.get()
        batch = [first]
        window_end = time.monotonic() + self.wait_s
        while len(batch) < self.batch_size:
            try:
                batch.append(self.queue.get_nowait()[-1])
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = window_end - time.monotonic()
            if remaining <= 0:
                break
            try:
                batch.append((await asyncio.wait_for(self.queue.get(), remaining))[-1])
            except TimeoutError:
                break
        self.metrics.queue_depth.dec(len(batch))
        return batch

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._collect()
            now = time.monotonic()
            live = []
            for p in batch:
                if p.future.done() or p.item.cancelled.is_set() or p.item.deadline <= now:
                    self.metrics.dropped.inc()
                    if not p.future.done():
                        p.future.set_exception(DeadlineExceeded("the request deadline passed before generation"))
                else:
                    live.append(p)
            if not live:
                continue
            self.progress.batch_started()
            try:
                results = await loop.run_in_executor(self.executor, self.run_batch, [p.item for p in live])
                if len(results) != len(live):
                    raise RuntimeError(f"engine returned {len(results)} results for {len(live)} pages")
            except Exception as exc:  # noqa: BLE001 - a failing engine fails its batch, then the process
                log.exception("generate failed; the engine is considered dead")
                for p in live:
                    if not p.future.done():
                        p.future.set_exception(EngineFailure("the model failed while generating; the server restarts"))
                self.on_fatal(exc)
                continue
            finally:
                self.progress.batch_ended()
            for p, r in zip(live, results):
                if not p.future.done():
                    p.future.set_result(r)
