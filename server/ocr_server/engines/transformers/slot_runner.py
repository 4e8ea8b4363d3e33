"""The runner for DECODER=slots: continuous batching on the one engine thread.

Pages join the slots decoder (slots.py) between decode steps, as soon as a slot is free, interactive
pages before batch ones (engines/scheduling.py): the waiting interactive pages are prefilled
together (up to the plan's prefill_pages), and the prefill's chunks share the engine's time with
decode steps while rows are decoding (PREFILL_SHARE of it for prefills, by time, not by turns), so
those rows keep streaming and a burst of new pages still gets most of the engine. Each page's future is answered the moment
its row ends (EOS, its own budget, its deadline, cancellation), not when a batch ends. While an interactive request is
inside the server (`hold_batch`, from admission), no new batch page joins: the rows already decoding
go on, and the pages of a batch wait until the person's request is answered. The engine thread runs while
there is work and returns when there is none, so the warm-up (which runs on the same thread, before
any request) never waits behind it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar

from ocr_limits.request_classes import INTERACTIVE

from ...runtime.errors import DeadlineExceeded, EngineFailure
from ...runtime.liveness import ProgressClock
from ...runtime.metrics import Metrics
from ...runtime.plugins import EngineHooks
from ..api import Generated
from ..scheduling import BATCH_HOLD_MAX_S, ClassQueue
from .slots import Finished

if TYPE_CHECKING:
    from .engine import Engine, TensorPage

T = TypeVar("T")

log = logging.getLogger("ocr_server.slot_runner")
HOLD_POLL_S = 0.002  # how often an idle engine holding batch pages looks again


@dataclass
class _Pending:
    item: TensorPage
    future: asyncio.Future[Generated]
    queued_at: float = 0.0  # time.monotonic() when it entered the inbox


class SlotRunner:
    """A Runner (engines/api.py) for the slots decoder."""

    def __init__(self, engine: Engine, *, metrics: Metrics, on_fatal: Callable[[BaseException], None],
                 hooks: EngineHooks | None = None, interactive_inside: Callable[[], bool] = lambda: False) -> None:
        if engine.slots is None:
            raise ValueError("the slots runner needs an engine loaded with DECODER=slots")
        self.engine, self.slots = engine, engine.slots
        self.metrics, self.on_fatal = metrics, on_fatal
        self.capacity = self.slots.plan.slots  # pages decoded at once: the admission limit's floor
        self.prefill_share = engine.cfg.runtime.prefill_share
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.inbox: ClassQueue[_Pending] = ClassQueue()  # interactive pages take a free slot first
        self.progress = ProgressClock()
        self.hooks = hooks or EngineHooks()  # plugins' hooks, run on the engine thread (pages join, steps)
        self._lock = threading.Lock()
        self._driving = False
        self._closing = False
        self._open: dict[int, _Pending] = {}  # id(item) -> its page, while its row is in a slot
        self.loop: asyncio.AbstractEventLoop | None = None
        # True while an interactive request is inside the server: batch pages do not join then.
        self.hold_batch = interactive_inside
        # The engine thread's time by work (on a GPU the host's: launches, and the step's wait for its tokens).
        self._prefill_busy = metrics.engine_busy.labels("prefill")
        self._decode_busy = metrics.engine_busy.labels("decode")

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()

    async def on_engine_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    async def stop(self) -> None:
        self._closing = True
        self.executor.shutdown(wait=False, cancel_futures=True)

    def stalled_for(self) -> float:
        """Seconds the engine has owed work without a step (runtime/liveness.py); 0 when idle."""
        return self.progress.stalled_for(len(self.inbox))

    async def submit(self, item: TensorPage) -> Generated:
        """Queue one page; the result is its Generated, or DeadlineExceeded/EngineFailure."""
        fut: asyncio.Future[Generated] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved even if nobody awaits
        self.progress.work_arrived(was_idle=not self.inbox and not self.progress.running)
        self.inbox.append(_Pending(item, fut, time.monotonic()), item.request_class)
        self.metrics.queue_depth.inc()
        # After the tasks already ready on the loop: the pages of one request (submitted together by
        # asyncio.gather) are all in the inbox when the engine thread takes them, so they join in one step.
        asyncio.get_running_loop().call_soon(self._kick)
        try:
            remaining = item.deadline - time.monotonic()
            return await asyncio.wait_for(asyncio.shield(fut), max(remaining, 0.0))
        except TimeoutError:
            item.cancelled.set()  # its row leaves its slot at the next step
            raise DeadlineExceeded("the request deadline passed during generation") from None
        finally:
            if not fut.done():
                item.cancelled.set()

    def _kick(self) -> None:
        """Start the engine thread's loop unless it runs (called on the event loop)."""
        with self._lock:
            if self._driving:
                return
            self._driving = True
        self.progress.batch_started()
        self.executor.submit(self._drive)

    # ---------- the engine thread ----------
    def _drive(self) -> None:
        end = object()
        filling: Iterator[None] | None = None  # the prefill in progress, chunk by chunk
        credit = 0.0  # decode time owed to the rows by the prefill chunks (decode_owed), less the steps since
        try:
            while not self._closing:
                joining: list[_Pending] = []
                if filling is None:
                    joining = self._take_joining()
                    if joining:
                        self.hooks.run_before_work()
                        for pending in joining:
                            self._open[id(pending.item)] = pending
                        filling = self.slots.prefill([p.item for p in joining])
                        self.metrics.prefill_pages.observe(len(joining))
                        # Steps decoded since the last prefill paid off no chunk of this one: owing
                        # them, a page joining rows that had decoded a while was prefilled whole
                        # while the rows waited.
                        credit = 0.0
                if filling is not None and (credit <= 0 or not self.slots.rows):
                    t0 = time.perf_counter()
                    if next(filling, end) is end:
                        filling = None  # its rows decode from the next step
                    chunk = time.perf_counter() - t0
                    self._prefill_busy.inc(chunk)
                    owed = decode_owed(chunk, self.prefill_share)
                    credit = credit + owed if self.slots.rows and filling is not None else 0.0
                    if filling is not None and (not self.slots.rows or credit <= 0):
                        continue  # the next chunk at once: nothing decodes meanwhile, or the rows are paid
                if self.slots.idle():
                    with self._lock:
                        if not self.inbox:
                            self._driving = False
                            break
                    if not joining:  # only batch pages wait, held for an interactive request
                        self.progress.advanced()
                        time.sleep(HOLD_POLL_S)
                    continue
                rows = len(self.slots.rows)
                t0 = time.perf_counter()
                for ended in self.slots.step():
                    self._answer(ended)
                took = time.perf_counter() - t0
                self._decode_busy.inc(took)
                credit -= took
                self.progress.advanced()
                self.hooks.run_after_step()
                if rows:
                    self.metrics.batch_size.observe(rows)
        except Exception as exc:  # noqa: BLE001 - a failing engine fails its pages, then the process
            log.exception("the slots decoder failed; the engine is considered dead")
            self._fail_all()
            with self._lock:
                self._driving = False
            self._call(self.on_fatal, exc)
        finally:
            if filling is not None:
                filling.close()  # its slots go back
        self._call(self.progress.batch_ended)

    def _take_joining(self) -> list[_Pending]:
        """Pages that get a free slot now, prefilled together; those already past their deadline or
        cancelled are dropped. Interactive pages join together (up to the plan's prefill_pages);
        batch pages join one at a time (the hold is looked at again before each one's prefill), and
        none while an interactive request is inside: an interactive page arriving waits for at most
        one batch page's prefill (a batch page is held back BATCH_HOLD_MAX_S at most)."""
        joining: list[_Pending] = []
        now = time.monotonic()
        room = min(self.slots.free_slots(), self.slots.plan.prefill_pages)
        while self.inbox and room > len(joining):
            if not self.inbox.count(INTERACTIVE) and (joining or self._held(now)):
                break
            pending = self.inbox.popleft()
            self.metrics.queue_depth.dec()
            if pending.future.done() or pending.item.cancelled.is_set() or pending.item.deadline <= now:
                self.metrics.dropped.inc()
                self._call(_fail, pending.future, DeadlineExceeded("the request deadline passed before generation"))
            else:
                joining.append(pending)
        return joining

    def _held(self, now: float) -> bool:
        """Whether the first batch page waits on: an interactive request is inside, and the page has
        not been held BATCH_HOLD_MAX_S yet."""
        return self.hold_batch() and now - self.inbox.first().queued_at < BATCH_HOLD_MAX_S

    def _answer(self, ended: Finished) -> None:
        pending = self._open.pop(id(ended.item))
        self._call(_succeed, pending.future, self.engine.generated(ended))

    def _fail_all(self) -> None:
        error = EngineFailure("the model failed while generating; the server restarts")
        self.slots.cancel_all()
        for pending in list(self._open.values()) + list(self.inbox):
            self._call(_fail, pending.future, error)
        self._open.clear()
        self.inbox.clear()

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, *args)


def decode_owed(chunk_seconds: float, prefill_share: float) -> float:
    """Decode time the rows are owed for a prefill chunk of `chunk_seconds` (pure), so that prefills
    take `prefill_share` of the engine's time while rows decode. Owed time adds up and each step
    pays its own time off, so a step longer than a chunk is paid for by the chunks after it: the
    shares hold by time, whatever the sizes of chunks and steps. On an H200 a chunk of 8 pages is
    about 2 ms and a step of 64 rows 4.6 ms: one step per chunk (turns) gave prefills a third of the
    time. At 0.9 a row decoding beside a burst gets a step about every ten steps' time; 1 prefills
    first (rows wait for the whole burst)."""
    return 0.0 if prefill_share >= 1 else chunk_seconds * (1 - prefill_share) / prefill_share


def _succeed(fut: asyncio.Future[Generated], value: Generated) -> None:
    if not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Generated], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)
