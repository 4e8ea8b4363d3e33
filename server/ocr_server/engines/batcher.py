"""The dynamic batcher (after Ray Serve's _BatchQueue): static batches for DECODER=generate and the stand-in.

One future per page; one task takes the first waiting page (interactive pages before batch ones,
engines/scheduling.py), then more until BATCH_SIZE or the wait window closes, drops pages whose
request expired or was cancelled (no GPU time for them), and runs one batch in the single engine
thread. A batch that fails fails its pages and then the process (on_fatal).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from ..runtime.errors import DeadlineExceeded, EngineFailure
from ..runtime.liveness import ProgressClock
from ..runtime.metrics import Metrics
from ..runtime.plugins import EngineHooks
from .api import Generated, PreparedPage
from .scheduling import rank

P = TypeVar("P", bound=PreparedPage)
T = TypeVar("T")

log = logging.getLogger("ocr_server.batching")


@dataclass
class _Pending(Generic[P]):
    item: P
    future: asyncio.Future[Generated]


class Batcher(Generic[P]):
    """A Runner (engines/api.py) over a synchronous `run_batch`: the engine's generate_batch."""

    capacity = 0  # no floor under admission: CONCURRENCY caps the batch

    def __init__(
        self,
        run_batch: Callable[[list[P]], list[Generated]],
        *,
        batch_size: int,
        wait_s: float,
        metrics: Metrics,
        on_fatal: Callable[[BaseException], None],
        hooks: EngineHooks | None = None,
    ) -> None:
        self.run_batch, self.batch_size, self.wait_s = run_batch, batch_size, wait_s
        self.hooks = hooks or EngineHooks()  # plugins' hooks, run on the engine thread before each batch
        self.metrics, self.on_fatal = metrics, on_fatal
        # (class rank, arrival, page): interactive pages first, then first come, first served
        self.queue: asyncio.PriorityQueue[tuple[int, int, _Pending[P]]] = asyncio.PriorityQueue()
        self._arrivals = itertools.count()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self._task: asyncio.Task[None] | None = None
        self.progress = ProgressClock()

    def stalled_for(self) -> float:
        """Seconds the engine has owed work without progress (runtime/liveness.py); 0 when idle."""
        return self.progress.stalled_for(self.queue.qsize())

    async def on_engine_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, item: P) -> Generated:
        """Queue one page; the result is its Generated, or DeadlineExceeded/EngineFailure."""
        fut: asyncio.Future[Generated] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if nobody awaits
        self.progress.work_arrived(was_idle=self.queue.empty() and not self.progress.running)
        self.queue.put_nowait((rank(item.request_class), next(self._arrivals), _Pending(item, fut)))
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

    async def _collect(self) -> list[_Pending[P]]:
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

    def _run(self, items: list[P]) -> list[Generated]:
        """One batch on the engine thread, after the plugins' hooks."""
        self.hooks.run_before_work()
        self.metrics.prefill_pages.observe(len(items))  # generate() prefills its batch in one pass
        t0 = time.perf_counter()
        try:
            return self.run_batch(items)
        finally:
            self.metrics.engine_busy.labels("generate").inc(time.perf_counter() - t0)

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
                results = await loop.run_in_executor(self.executor, self._run, [p.item for p in live])
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
