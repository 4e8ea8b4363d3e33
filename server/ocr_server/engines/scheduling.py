"""Request classes: interactive traffic is served first, batch traffic is shed first.

A request names its class in the X-Request-Class header: `interactive` (the default, a person
waiting) or `batch` (a bulk job that can retry later). Admission (serving/admission.py) starts a
waiting interactive request before any waiting batch request, and the engine's queues (the
generate batcher, the slots decoder's inbox) take interactive pages first; within a class the order
is first come, first served. Once BATCH_QUEUE_THRESHOLD requests wait, a batch request is answered
429 with Retry-After while interactive requests still queue up to QUEUE_SIZE.

Batch requests hold at most BATCH_MAX_RUNNING of the slots (by default three quarters): the rest
are kept for interactive requests, so one arriving during a batch starts at once instead of
waiting for a batch page to finish. And while an interactive request is inside, a batch request
reads no new document and the slots decoder starts no new batch page (transformers/slot_runner.py), each for
BATCH_HOLD_MAX_S at most: the pages of a batch yield the CPU and the engine to a person waiting,
and still flow under steady interactive traffic. Nothing running is preempted.

Here: the queue by class that admission (serving/admission.py) and the engines' runners (the
generate batcher, the slots runner) keep, and how long batch work is held back. The header is read
by the HTTP layer (http/request_class.py), the admission decision is serving/admission.py's.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Iterator, TypeVar

from ocr_limits.request_classes import CLASSES

T = TypeVar("T")
# The longest a batch request's reading, or a batch page's start in the decoder, is held back while
# interactive requests are inside: batch work still flows (each page a little later) under steady
# interactive traffic, and none runs into its deadline for being held.
BATCH_HOLD_MAX_S = 2.0


def rank(request_class: str) -> int:
    """Sort key: interactive (0) before batch (1)."""
    return CLASSES.index(request_class)


class ClassQueue(Generic[T]):
    """First in, first out within a class; every interactive entry leaves before any batch entry.

    One consumer may pop on another thread while the event loop appends (deque's append and popleft
    are atomic, and only the consumer pops)."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[T]] = {c: deque() for c in CLASSES}

    def append(self, entry: T, request_class: str) -> None:
        self._queues[request_class].append(entry)

    def popleft(self) -> T:
        for request_class in CLASSES:
            if self._queues[request_class]:
                return self._queues[request_class].popleft()
        raise IndexError("pop from an empty ClassQueue")

    def first(self) -> T:
        """The entry that would leave next, left in place (IndexError when empty); no copy, so the
        engine thread may look at it every step."""
        for request_class in CLASSES:
            if self._queues[request_class]:
                return self._queues[request_class][0]
        raise IndexError("first of an empty ClassQueue")

    def popleft_of(self, request_class: str) -> T:
        """The first entry of one class (IndexError when it has none)."""
        return self._queues[request_class].popleft()

    def remove(self, entry: T, request_class: str) -> bool:
        """Take `entry` out wherever it waits (a request that gave up); False if it is not queued."""
        try:
            self._queues[request_class].remove(entry)
        except ValueError:
            return False
        return True

    def count(self, request_class: str) -> int:
        return len(self._queues[request_class])

    def clear(self) -> None:
        for q in self._queues.values():
            q.clear()

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def __iter__(self) -> Iterator[T]:
        """Every entry in the order they would leave."""
        return (entry for c in CLASSES for entry in list(self._queues[c]))
