"""A de-duplicating, fair, rate-limited work queue of OcrService keys (client-go's workqueue).

- A key is in the queue at most once; a key being processed is never handed to a second
  worker: adding it meanwhile marks it dirty and it is queued again when ``done``.
- Three lanes: ``urgent`` for keys whose spec is new or changed (the user waits for them),
  ``normal`` for wake-ups from child events (a Deployment became ready: the user waits for Ready),
  ``later`` for wake-ups of timers (a settle period over, a held status patch, a deadline, a
  retry). While both wait, ``URGENT_BURST`` urgent keys, then one normal key: with 1 they
  alternate. Later keys are served when the other two lanes are empty, or once one has waited
  ``LATER_MAX_WAIT_SECONDS``: it then joins the normal lane. So in a storm of new objects the
  writes that report the first ones Ready are not queued behind the creates of the last ones, nor
  behind the writes that report objects settled (on a CPU-bound API server every request delays
  every other), and no timer waits without bound. At 500 OcrServices created at once the median
  time to Ready went from about 2x the API floor's to 1.55x (bench/operator_bench.py; figures in
  docs/development/benchmarks.md).
  A key waiting in a lane moves to a more urgent one when it is added there.
- A token bucket (``qps``, ``burst``) bounds how fast keys are handed out, so a storm of
  events cannot turn into a storm of API requests.

Not thread-safe by design: every call happens on the event loop's thread (the kopf handlers
that feed it are ``async``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Awaitable, Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)

URGENT, NORMAL, LATER = "urgent", "normal", "later"
RANK = {URGENT: 0, NORMAL: 1, LATER: 2}  # lower is served first
URGENT_BURST = 1
LATER_MAX_WAIT_SECONDS = 30.0


class TokenBucket:
    """`qps` tokens a second, at most `burst` saved up; `delay()` says how long until one is free."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps, self.burst, self.clock = qps, burst, clock
        self.tokens = float(burst)
        self.stamp = clock()

    def delay(self) -> float:
        """Take a token if one is free (0.0), else the seconds until one will be."""
        if self.qps <= 0:
            return 0.0
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.stamp) * self.qps)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 0.0
        return (1.0 - self.tokens) / self.qps


class WorkQueue(Generic[K]):
    def __init__(self, *, qps: float = 0.0, burst: int = 100, clock: Callable[[], float] = time.monotonic) -> None:
        self.lanes: dict[str, deque[K]] = {URGENT: deque(), NORMAL: deque(), LATER: deque()}
        self.waiting: dict[K, str] = {}      # key -> lane it waits in
        self.later_since: dict[K, float] = {}  # key in the later lane -> when it was added there
        self.processing: set[K] = set()
        self.dirty: dict[K, str] = {}        # added while processing -> lane once done
        self.clock = clock
        self.bucket = TokenBucket(qps, burst, clock)
        self._urgent_run = 0
        self._ready = asyncio.Event()
        self.adds = 0

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, key: K, *, urgent: bool = False, later: bool = False) -> None:
        """Queue `key` in the urgent lane, the later lane (`later`: a timer's wake-up) or the
        normal one; a key already waiting in a more urgent lane stays there."""
        lane = URGENT if urgent else LATER if later else NORMAL
        self.adds += 1
        if key in self.processing:
            if key not in self.dirty or RANK[lane] < RANK[self.dirty[key]]:
                self.dirty[key] = lane
            return
        current = self.waiting.get(key)
        if current is not None and RANK[current] <= RANK[lane]:
            return
        if current is not None:  # promote
            self._leave(key, current)
        self._join(key, lane)
        self._ready.set()

    def _join(self, key: K, lane: str) -> None:
        self.waiting[key] = lane
        self.lanes[lane].append(key)
        if lane == LATER:
            self.later_since[key] = self.clock()

    def _leave(self, key: K, lane: str) -> None:
        self.lanes[lane].remove(key)
        self.later_since.pop(key, None)

    def _promote_aged(self) -> None:
        """Later keys that have waited LATER_MAX_WAIT_SECONDS join the normal lane, oldest first."""
        later, now = self.lanes[LATER], self.clock()
        while later and now - self.later_since[later[0]] >= LATER_MAX_WAIT_SECONDS:
            key = later.popleft()
            del self.later_since[key]
            self._join(key, NORMAL)

    def pop(self) -> K | None:
        """The next key by the fairness rule, or None when empty (no rate limit applied)."""
        self._promote_aged()
        urgent, normal, later = self.lanes[URGENT], self.lanes[NORMAL], self.lanes[LATER]
        if urgent and (not normal or self._urgent_run < URGENT_BURST):
            key = urgent.popleft()
            self._urgent_run += 1
        elif normal:
            key = normal.popleft()
            self._urgent_run = 0
        elif later:
            key = later.popleft()
            del self.later_since[key]
        else:
            return None
        del self.waiting[key]
        self.processing.add(key)
        if not self.waiting:
            self._ready.clear()
        return key

    async def get(self) -> K:
        """Wait for a key and a token, then hand the key out (marked processing)."""
        while True:
            while not self.waiting:
                self._ready.clear()
                await self._ready.wait()
            wait = self.bucket.delay()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            key = self.pop()
            if key is not None:
                return key

    async def serve(self, handle: Callable[[K], Awaitable[None]]) -> None:
        """A worker: forever take a key, `handle` it, and mark it done (also when `handle` raises)."""
        while True:
            key = await self.get()
            try:
                await handle(key)
            finally:
                self.done(key)

    def done(self, key: K) -> None:
        self.processing.discard(key)
        lane = self.dirty.pop(key, None)
        if lane is not None:
            self.add(key, urgent=lane == URGENT, later=lane == LATER)

    def forget(self, key: K) -> None:
        lane = self.waiting.pop(key, None)
        if lane is not None:
            self._leave(key, lane)
        self.dirty.pop(key, None)
