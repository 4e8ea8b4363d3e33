"""The workers' storage waits as the OcrBatch shows them (pure): the StorageAvailable condition and
its Warning event.

The operator never connects to a batch's storage; its workers do, and wait out an outage within
spec.limits.storageRetrySeconds (the worker's patience.py), then fail their pod for the Job to run
the index again. Without a word from them a batch whose S3 endpoint never answers is Running with
no page done for up to that budget times the index's retries. So a worker's progress report
carries the wait while it lasts (`storage`: which store, since when, the tries failed so far, the
last failure in a few words, never a key name or a credential), and the controller reads it from
the same log lines as the counts:

- Any unfinished index waiting: StorageAvailable False, reason StorageUnavailable, the message
  naming the index that has waited longest, its store (input or output), since when, its tries
  and last error, and how many other indices wait too; with a Warning event StorageUnavailable
  when the condition turns False (once per outage, however many indices and reads it lasts).
- No index waiting any more: True, reason StorageAvailable, if the condition was there (a batch
  that never met an outage has none). Nothing read yet (after an operator restart) is no news.

An index's last report is the last progress line of its log's tail (and a finished pod's
termination message): a worker writes one when a wait starts and ends and at most one a second
while it lasts, between its warnings of each failed try, so the tail holds one; when it does not,
the index's previous report stands until a read finds one.

The stall rule counts a wait's failed tries as progress (stall.progress_mark): a worker waiting is
alive and its own budget bounds the wait, so spec.stallSeconds need not exceed the budget.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

CONDITION = "StorageAvailable"
UNAVAILABLE, AVAILABLE = "StorageUnavailable", "StorageAvailable"  # its reasons (False, True)
STORES = ("input", "output")
MAX_ERROR_CHARS = 200  # the worker cuts its last error to this too


@dataclass(frozen=True)
class Wait:
    """One index's storage wait, from its last progress report."""

    index: int
    store: str  # input or output ("" when the worker did not say)
    since: float  # unix seconds
    retries: int
    last_error: str


def wait_of(index: int, report: Mapping[str, Any] | None) -> Wait | None:
    """The wait a report carries, or None (no wait, a finished index, or a field of the wrong shape:
    the log line is the worker's, read from a pod, and trusted for nothing but words)."""
    if not isinstance(report, Mapping) or report.get("finished"):
        return None
    storage = report.get("storage")
    if not isinstance(storage, Mapping):
        return None
    since, retries = storage.get("waiting_since"), storage.get("retries")
    store, error = storage.get("store"), storage.get("last_error")
    if not isinstance(since, (int, float)) or isinstance(since, bool) or not isinstance(retries, int):
        return None
    return Wait(index, store if store in STORES else "", float(since), retries,
                error[:MAX_ERROR_CHARS] if isinstance(error, str) else "")


def waits(reports: Mapping[int, Mapping[str, Any]]) -> list[Wait]:
    """The indices waiting for their storage, the longest-waiting first."""
    found = [w for i, r in reports.items() if (w := wait_of(i, r)) is not None]
    return sorted(found, key=lambda w: (w.since, w.index))


def _when(unix: float) -> str:
    try:
        return dt.datetime.fromtimestamp(unix, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return "an unknown time"


def message(found: Iterable[Wait], budget_seconds: int) -> str:
    """The condition's and the event's words: the longest wait, and how many indices wait."""
    first, *others = list(found)
    store = f"the {first.store} storage" if first.store else "the storage"
    more = f"; {len(others)} more index(es) waiting too" if others else ""
    return (f"index {first.index}: {store} has not answered since {_when(first.since)} ({first.retries} tries "
            f"failed; last: {first.last_error or 'unknown'}){more}. Each worker waits up to "
            f"spec.limits.storageRetrySeconds ({budget_seconds} s), then its pod fails and the Job runs the index "
            "again")


@dataclass(frozen=True)
class Verdict:
    """The StorageAvailable condition to write, and the Warning event's message when one is due."""

    status: str
    reason: str
    message: str
    event: str | None


def verdict(reports: Mapping[int, Mapping[str, Any]], previous: Mapping[str, Any] | None,
            budget_seconds: int) -> Verdict | None:
    """The StorageAvailable condition from the indices' last reports and the condition written
    before (`previous`, None when there is none); None: nothing to write (no wait, nor ever one)."""
    if not reports:  # nothing read yet (an operator restart, a log that cannot be read): no news
        return None
    found = waits(reports)
    if found:
        said = message(found, budget_seconds)
        was_false = previous is not None and previous.get("status") == "False"
        return Verdict("False", UNAVAILABLE, said, None if was_false else said)
    if previous is None:
        return None
    return Verdict("True", AVAILABLE, "every worker's storage answers", None)
