"""S3 outages waited out within the fetch's outage budget (FETCH_MAX_OUTAGE_SECONDS, the
OcrService's spec.model.source.s3.maxOutageSeconds).

A try that fails with a store.StoreOutage (no answer, a 5xx, throttling, after botocore's own few
retries) is tried again after a capped exponential backoff (ocr_limits.outages,
the OcrBatch worker's too), as long as the outage, measured from its first failed try to the next
success of any request or the next bytes, has lasted less than the budget (a transfer that got no
byte for FETCH_STALL_SECONDS starts an outage too: the store hangs); each failed try writes a progress line
saying the fetch waits for S3, why, and the budget left (report.Reporter.waiting_for_store). Past
the budget the fetch fails with ModelFetchFailed naming the outage and how long it waited. Refused
credentials, a missing bucket or object and a checksum mismatch are never waited for.
"""

from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

from ocr_limits.outages import Backoff, Outage

from . import FETCH_FAILED, FetchError
from .report import Reporter
from .store import StoreOutage

T = TypeVar("T")
BUDGET_FIELD = "spec.model.source.s3.maxOutageSeconds"


class StoreWait:
    def __init__(self, budget_seconds: float, reporter: Reporter, check: Callable[[], None],
                 backoff: Backoff = Backoff(), rng: Callable[[], float] = random.random) -> None:
        """`check` raises the fetch's other bounds (FETCH_TIMEOUT_SECONDS) while it waits."""
        self.outage = Outage(budget_seconds)
        self.report, self.check, self.backoff, self.rng = reporter, check, backoff, rng
        self.last: StoreOutage | None = None  # the last failed try

    @property
    def down(self) -> bool:
        return self.outage.since is not None

    def ok(self) -> None:
        """A request succeeded (or bytes came): the outage, if any, is over."""
        self.outage.ok()

    def failed(self, exc: StoreOutage, attempt: int) -> float:
        """Record a failed try (the `attempt`-th, 0-based, of its request); the seconds to wait
        before the next one, or FetchError(ModelFetchFailed) once the outage outlasts the budget."""
        left = self.outage.failed(exc.why)
        waited = self.outage.waited()
        budget = self.outage.budget
        self.last = exc
        if left <= 0:
            raise self._past(waited)
        retries = int((self.outage.report() or {}).get("retries", 1))
        self.report.waiting_for_store(exc.why, retries, waited, left, budget)
        return min(self.backoff.delay(attempt, self.rng()), left)

    def spent(self) -> None:
        """FetchError(ModelFetchFailed) once the current outage outlasts the budget, even while no
        try fails (requests that hang until their read timeout)."""
        waited = self.outage.waited()
        if self.down and waited > self.outage.budget:
            raise self._past(waited)

    def _past(self, waited: float) -> FetchError:
        return FetchError(FETCH_FAILED, f"S3 outage: the store did not answer for {waited:.1f}s, past the outage "
                                        f"budget of {self.outage.budget:g}s ({BUDGET_FIELD}); last: {self.last}")

    def call(self, op: Callable[[], T]) -> T:
        """`op` (one request), tried again while the store is down and the budget lasts."""
        attempt = 0
        while True:
            try:
                result = op()
            except StoreOutage as exc:
                delay = self.failed(exc, attempt)
                attempt += 1
                until = time.monotonic() + delay
                while time.monotonic() < until:
                    self.check()
                    time.sleep(min(0.2, max(0.0, until - time.monotonic())))
                continue
            self.ok()
            return result
