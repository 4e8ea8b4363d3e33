"""A de-duplicating, fair, rate-limited work queue of OcrService keys (client-go's workqueue).

- A key is in the queue at most once; a key being processed is never handed to a second
  worker: adding it meanwhile marks it dirty and it is queued again when ``done``.
- Two lanes, served fairly: ``urgent`` for keys whose spec is new or changed (the user waits
  for them), ``normal`` for wake-ups from child events and timers. Urgent keys go first, but
  after ``URGENT_BURST`` urgent keys in a row one normal key is served, so neither starves.
  A key already waiting in the normal lane moves to the urgent one when its spec changes.
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

URGENT, NORMAL = "urgent", "normal"
URGENT_BURST = 4


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
        self.lanes: dict[str, deque[K]] = {URGENT: deque(), NORMAL: deque()}
        self.waiting: dict[K, str] = {}      # key -> lane it waits in
        self.processing: set[K] = set()
        self.dirty: dict[K, str] = {}        # added while processing -> lane for later
        self.bucket = TokenBucket(qps, burst, clock)
        self._urgent_run = 0
        self._ready = asyncio.Event()
        self.adds = 0

    def __len__(self) -> int:
        return len(self.waiting)

    def add(self, key: K, *, urgent: bool = False) -> None:
        lane = URGENT if urgent else NORMAL
        self.adds += 1
        if key in self.processing:
            if urgent or key not in self.dirty:
                self.dirty[key] = lane
            return
        current = self.waiting.get(key)
        if current == URGENT or current == lane:
            return
        if current == NORMAL:  # promote
            self.lanes[NORMAL].remove(key)
        self.waiting[key] = lane
        self.lanes[lane].append(key)
        self._ready.set()

    def pop(self) -> K | None:
        """The next key by the fairness rule, or None when empty (no rate limit applied)."""
        urgent, normal = self.lanes[URGENT], self.lanes[NORMAL]
        if urgent and (not normal or self._urgent_run < URGENT_BURST):
            key = urgent.popleft()
            self._urgent_run += 1
        elif normal:
            key = normal.popleft()
            self._urgent_run = 0
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
            self.add(key, urgent=lane == URGENT)

    def forget(self, key: K) -> None:
        lane = self.waiting.pop(key, None)
        if lane is not None:
            self.lanes[lane].remove(key)
        self.dirty.pop(key, None)
