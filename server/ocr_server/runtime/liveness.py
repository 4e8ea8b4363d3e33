"""Liveness: the process answers, and its engine is not wedged.

A dead engine exits the process (app.py); a hung one (a generate call that never returns, a lost
CUDA context) does not, and used to answer 200 forever. The runner records when it last made
progress; an engine that owes work and has made none for LIVENESS_STALL_SEC fails /health/live,
so the kubelet restarts the pod.
"""

from __future__ import annotations

import time
from typing import Callable


class ProgressClock:
    """When the engine last made progress, kept by the runner on the event loop: work arriving on an
    idle engine starts the clock; a batch starting or ending is progress."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.last = clock()
        self.running = 0  # batches inside the engine now

    def work_arrived(self, was_idle: bool) -> None:
        if was_idle:
            self.last = self.clock()

    def batch_started(self) -> None:
        self.running += 1
        self.last = self.clock()

    def batch_ended(self) -> None:
        self.running -= 1
        self.last = self.clock()

    def advanced(self) -> None:
        """Progress inside a running batch: a decode step of the slots runner (from its engine thread;
        one float assignment)."""
        self.last = self.clock()

    def stalled_for(self, queued: int) -> float:
        """Seconds without progress while work is owed; 0 when the engine is idle."""
        return stalled_seconds(busy=self.running > 0 or queued > 0, last_progress=self.last, now=self.clock())


def stalled_seconds(*, busy: bool, last_progress: float, now: float) -> float:
    return max(now - last_progress, 0.0) if busy else 0.0


def is_wedged(stalled_s: float, bound_s: float) -> bool:
    return stalled_s > bound_s


def wedged_message(stalled_s: float, bound_s: float) -> str:
    return (f"the engine has made no progress for {stalled_s:.0f}s with work waiting "
            f"(LIVENESS_STALL_SEC={bound_s:g}); restart the pod")
