"""Polling with a deadline: the one way e2e tests wait for the cluster to converge."""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 60, interval: float = 0.5,
             message: str = "condition") -> T:
    """Return the predicate's first truthy value; fail with `message` and the last value seen.

    Exceptions from the predicate count as "not yet" (the object may not exist yet) and the
    last one is reported if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except Exception as exc:  # noqa: BLE001 - reported below
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message}; last: {last!r}")
        time.sleep(interval)
