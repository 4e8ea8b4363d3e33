"""Delayed wake-ups and per-key backoff: the one place a controller decides when to look again.

A key has at most one pending wake-up, and the earliest asked for wins: a reconcile that needs to
look again in 2 s (a deadline) is never pushed back by one that asks for 300 s (the resync), and a
later, shorter request brings a pending one forward. A failed reconcile backs off exponentially
(``delay(n)``: BASE_SECONDS * 2^(n-1), at most ``max_backoff``); a success resets the count.

Runs on the event loop's thread (``asyncio`` timers), like the work queue it feeds.
"""

from __future__ import annotations

import asyncio
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)

BASE_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 60.0


def backoff_delay(failures: int, max_backoff: float = MAX_BACKOFF_SECONDS) -> float:
    """Seconds before retrying after the `failures`-th failure in a row (1, 2, ...)."""
    return min(max_backoff, BASE_SECONDS * 2 ** max(0, failures - 1))


class Timers(Generic[K]):
    """Wake-ups by key; `fire(key)` is called when one is due."""

    def __init__(self, fire: Callable[[K], None], *, max_backoff: float = MAX_BACKOFF_SECONDS) -> None:
        self._fire = fire
        self.max_backoff = max_backoff
        self.pending: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self.failures: dict[K, int] = {}

    def after(self, key: K, delay: float) -> None:
        """Wake `key` in `delay` seconds, unless a wake-up at or before then is already pending."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(0.0, delay)
        pending = self.pending.get(key)
        if pending is not None and pending[0] <= when:
            return
        if pending is not None:
            pending[1].cancel()
        self.pending[key] = (when, loop.call_at(when, self._due, key))

    def _due(self, key: K) -> None:
        self.pending.pop(key, None)
        self._fire(key)

    def failed(self, key: K) -> float:
        """Count one more failure of `key` and wake it after its backoff; the delay chosen."""
        n = self.failures[key] = self.failures.get(key, 0) + 1
        delay = backoff_delay(n, self.max_backoff)
        self.after(key, delay)
        return delay

    def succeeded(self, key: K) -> None:
        self.failures.pop(key, None)

    def forget(self, key: K) -> None:
        self.failures.pop(key, None)
        pending = self.pending.pop(key, None)
        if pending is not None:
            pending[1].cancel()

    def cancel_all(self) -> None:
        for _, handle in self.pending.values():
            handle.cancel()
        self.pending.clear()
