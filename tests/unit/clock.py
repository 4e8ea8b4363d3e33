"""A clock the test sets by hand: pass it where the code under test takes `clock=` (time.monotonic's shape)."""

from __future__ import annotations


class ManualClock:
    """`clock()` returns `clock.now`; a test moves time by changing `now`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
