"""Storage outages waited out, within a budget: a Store whose transient failures are retried.

Every operation of the input and output stores goes through a PatientStore. A transient failure
(storage.TransientStoreError: an S3 5xx, throttling, a timeout or reset connection; ENOSPC, EIO
on a volume) is tried again after an exponential backoff with jitter, for as long as the current
outage has lasted less than the budget (spec.limits.storageRetrySeconds). The outage is the
worker's, not the operation's: it starts at the first failure after a success and ends at the
next success of any operation, so concurrent operations share one clock and a long batch with a
few short outages never runs out. When any operation succeeds again, every operation waiting out
the same outage is woken to try at once (the first to see the storage back ends the others' sleep),
and no single wait is longer than the backoff's cap (10 s): a worker resumes within seconds of the
storage's return, not a doubled backoff later. Past the budget, the operation raises StorageUnavailable and
the worker exits with contract.EXIT_STORAGE: its pod fails, and the Job starts another
(backoffLimitPerIndex), which skips every document already done.

Any other StoreError (a missing object, credentials refused, a key too long) is raised at once:
waiting would not change it. stop() (SIGTERM) ends every wait at once.

While an outage lasts, Outage.report() says so for the worker's progress report: which store
(input or output) failed last, since when (unix seconds), how many tries have failed, and the
last failure in a few words (TransientStoreError.reason: no key, no credentials; cut to
MAX_ERROR_CHARS). Its listeners are told when an outage starts, at each failed try and when it
ends, from the thread that saw it (worker.py turns that into a progress line). An S3 store tells
it of each of its own attempts that timed out as it happens (s3.S3Store.attempt_timed_out): an
endpoint that accepts connections and never answers fails a request only after botocore's
attempts times the read timeout (5 minutes), and the wait is reported from the first.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from .retry import exponential
from .storage import Store, TransientStoreError

log = logging.getLogger("ocr_batch_worker")
T = TypeVar("T")
MAX_ERROR_CHARS = 200  # the last failure's words in a progress report (an S3 error code is the server's)


class StorageUnavailable(Exception):
    """The storage failed for longer than the budget: this pod stops, a new one tries again."""


@dataclass(frozen=True)
class Backoff:
    base_seconds: float = 0.5
    # The longest sleep between two tries of one operation: how late, at worst, a worker whose
    # operations all failed sees the storage back (a few requests a minute to a storage that is down).
    cap_seconds: float = 10.0

    def delay(self, attempt: int, jitter: float) -> float:
        return exponential(attempt, jitter, self.base_seconds, self.cap_seconds)


class Outage:
    """The storage's current outage, shared by every operation of a worker (thread-safe)."""

    def __init__(self, budget_seconds: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.budget = budget_seconds
        self.clock, self.wall = clock, wall
        self.since: float | None = None
        self.stopping = threading.Event()
        self._changed = threading.Condition()
        self._recoveries = 0  # outages ended so far: a waiter wakes when it moves
        self._state: dict[str, Any] | None = None  # report()'s
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener` (from the failing or succeeding operation's thread) whenever report() changes."""
        self._listeners.append(listener)

    def report(self) -> dict[str, Any] | None:
        """The current outage for the progress report (None: the storage answers): `store`,
        `waiting_since` (unix seconds), `retries` (the tries failed so far), `last_error`."""
        with self._changed:
            return dict(self._state) if self._state is not None else None

    def failed(self, error: str = "", store: str = "", count: bool = True) -> float:
        """Record a transient failure of `store` (its reason in a few words; count False: a try
        recorded already); the seconds of budget left (<= 0: spent)."""
        with self._changed:
            now = self.clock()
            if self.since is None:
                self.since = now
                self._state = {"waiting_since": round(self.wall(), 3), "retries": 0}
            assert self._state is not None
            count = count or self._state["retries"] == 0  # recorded in an outage since ended: a new one's
            if count:
                self._state.update(store=store, last_error=error[:MAX_ERROR_CHARS],
                                   retries=self._state["retries"] + 1)
            left = self.budget - (now - self.since)
        if count:
            self._tell()
        return left

    def ok(self) -> None:
        with self._changed:
            if self.since is None:
                return
            self.since, self._state = None, None
            self._recoveries += 1
            self._changed.notify_all()
        self._tell()

    def _tell(self) -> None:
        for listener in self._listeners:
            listener()

    def stop(self) -> None:
        self.stopping.set()
        with self._changed:
            self._changed.notify_all()

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`, less if another operation sees the storage answer again or the
        worker stops; True when stopping."""
        with self._changed:
            seen = self._recoveries
            self._changed.wait_for(lambda: self.stopping.is_set() or self._recoveries != seen, timeout=seconds)
        return self.stopping.is_set()


class PatientStore:
    """A Store whose transient failures are retried while the outage is within its budget."""

    def __init__(self, store: Store, outage: Outage, backoff: Backoff = Backoff(),
                 rng: Callable[[], float] = random.random, role: str = "") -> None:
        """`role`: "input" or "output", the store's name in the outage's report. A store that says
        when one of its own attempts timed out (s3.S3Store) starts or goes on with the outage then."""
        self.store, self.outage, self.backoff, self.rng, self.role = store, outage, backoff, rng, role
        if hasattr(store, "attempt_timed_out"):
            store.attempt_timed_out = self._timed_out

    def _timed_out(self, reason: str) -> None:
        self.outage.failed(reason, self.role)

    def _call(self, what: str, op: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                result = op()
            except TransientStoreError as exc:
                left = self.outage.failed(getattr(exc, "reason", "") or type(exc).__name__, self.role,
                                          count=not getattr(exc, "told", False))
                if left <= 0 or self.outage.stopping.is_set():
                    raise StorageUnavailable(f"the storage failed for more than {self.outage.budget:g} s "
                                             f"(spec.limits.storageRetrySeconds); last: {exc}") from None
                delay = min(self.backoff.delay(attempt, self.rng()), left)
                log.warning("%s failed (%s); again in %.1f s", what, exc, delay)
                attempt += 1
                if self.outage.wait(delay):
                    raise StorageUnavailable(f"stopped while waiting for the storage: {exc}") from None
                continue
            self.outage.ok()
            return result

    def list(self, limit: int) -> list[tuple[str, int]]:
        return self._call("listing", lambda: self.store.list(limit))

    def get(self, key: str, max_bytes: int) -> bytes:
        return self._call(f"reading {key!r}", lambda: self.store.get(key, max_bytes))

    def put(self, key: str, data: bytes) -> None:
        self._call(f"writing {key!r}", lambda: self.store.put(key, data))

    def exists(self, key: str) -> bool:
        return self._call(f"looking up {key!r}", lambda: self.store.exists(key))
