"""Storage outages waited out within a budget: the backoff, the outage's clock and which S3 answers
say "later". Shared by the OcrBatch worker (ocr_batch_worker.patience, its stores) and the model
fetcher (ocr_server.fetch, the OcrService's model-fetch init container), so that both wait alike.
Pure: no client here; each program maps its own client's errors onto s3_answer().

- exponential / Backoff: the delay before a try, exponential in the attempt, capped, jittered;
- Outage: one program's current outage, from its first failure to the next success of any
  operation, with the budget left and a report of it (thread-safe; waiters woken on recovery);
- s3_answer: what an S3 error answer (its code, else its HTTP status) is: "transient" (throttling,
  a 5xx: try again later), "bucket", "credentials", "missing" (never waited for) or "other".
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

MAX_ERROR_CHARS = 200  # the last failure's words in a progress report (an S3 error code is the server's)

# S3 error codes; versitygw answers an unknown access key with 404 XAdminUserNotFound (AWS: 403).
BUCKET_CODES = frozenset({"NoSuchBucket"})
CREDENTIAL_CODES = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied",
                              "XAdminUserNotFound", "InvalidToken", "ExpiredToken", "403"})
MISSING_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
# Answers that say "later": throttling, and the server's own failures (any 5xx).
TRANSIENT_CODES = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
                             "TooManyRequests", "RequestTimeout", "InternalError",
                             "ServiceUnavailable", "503", "500", "502", "504"})
TRANSIENT, BUCKET, CREDENTIALS, MISSING, OTHER = "transient", "bucket", "credentials", "missing", "other"


def s3_answer(code: str, status: int | None) -> str:
    """Which kind of failure an S3 error answer is: its code, else (an answer without a body) its status."""
    if code in TRANSIENT_CODES or (status is not None and (status >= 500 or status == 429)):
        return TRANSIENT
    if code in BUCKET_CODES:
        return BUCKET
    if code in CREDENTIAL_CODES or status == 403:
        return CREDENTIALS
    if code in MISSING_CODES or status == 404:
        return MISSING
    return OTHER


def exponential(attempt: int, jitter: float, base_seconds: float, cap_seconds: float) -> float:
    """The one backoff: exponential in the attempt (0-based), capped, scaled by jitter in [0.5, 1]
    so that retries started together spread out."""
    return min(cap_seconds, base_seconds * 2 ** min(attempt, 30)) * (0.5 + 0.5 * jitter)


@dataclass(frozen=True)
class Backoff:
    base_seconds: float = 0.5
    # The longest sleep between two tries of one operation: how late, at worst, a program whose
    # operations all failed sees the storage back (a few requests a minute to a storage that is down).
    cap_seconds: float = 10.0

    def delay(self, attempt: int, jitter: float) -> float:
        return exponential(attempt, jitter, self.base_seconds, self.cap_seconds)


class Outage:
    """The storage's current outage, shared by every operation of a program (thread-safe)."""

    def __init__(self, budget_seconds: float, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.budget = budget_seconds
        self.clock, self.wall = clock, wall
        self.since: float | None = None
        self.stopping = threading.Event()
        self._changed = threading.Condition()
        self._recoveries = 0  # outages ended so far: a waiter wakes when it moves
        self._state: dict[str, Any] | None = None  # report()'s
        self._version = 0  # changes of _state so far: news() tells a late reader what is newer
        self._listeners: list[Callable[[], None]] = []

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener` (from the failing or succeeding operation's thread) whenever report() changes."""
        self._listeners.append(listener)

    def report(self) -> dict[str, Any] | None:
        """The current outage for a progress report (None: the storage answers): `store`,
        `waiting_since` (unix seconds), `retries` (the tries failed so far), `last_error`."""
        return self.news()[1]

    def news(self) -> tuple[int, dict[str, Any] | None]:
        """report() with its version (higher: newer), read together: a listener that hands the state
        on to another thread can drop a state that arrives after a newer one."""
        with self._changed:
            return self._version, dict(self._state) if self._state is not None else None

    def waited(self) -> float:
        """The seconds the current outage has lasted (0: none)."""
        with self._changed:
            return 0.0 if self.since is None else self.clock() - self.since

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
                self._version += 1
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
            self._version += 1
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
        program stops; True when stopping."""
        with self._changed:
            seen = self._recoveries
            self._changed.wait_for(lambda: self.stopping.is_set() or self._recoveries != seen, timeout=seconds)
        return self.stopping.is_set()


# The model fetcher's outage budget (spec.model.source.s3.maxOutageSeconds, FETCH_MAX_OUTAGE_SECONDS).
DEFAULT_FETCH_OUTAGE_SECONDS = 300
MAX_FETCH_OUTAGE_SECONDS = 3600
