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

The backoff and the outage's clock are ocr_limits.outages' (Backoff, Outage), shared with the
model fetcher. While an outage lasts, Outage.report() says so for the worker's progress report:
which store (input or output) failed last, since when (unix seconds), how many tries have failed, and the
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
from typing import Callable, TypeVar

from ocr_limits.outages import MAX_ERROR_CHARS, Backoff, Outage

from .storage import Store, TransientStoreError

__all__ = ["MAX_ERROR_CHARS", "Backoff", "Outage", "PatientStore", "StorageUnavailable"]
log = logging.getLogger("ocr_batch_worker")
T = TypeVar("T")


class StorageUnavailable(Exception):
    """The storage failed for longer than the budget: this pod stops, a new one tries again."""


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
