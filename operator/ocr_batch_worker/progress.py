"""A Job index's progress report, and when to write it (pure).

Each pod of an index writes progress/index-<n>.<pod>.json, replacing it, at most every `interval` seconds and
when it ends, never once per page: the operator reads the files of all indices and writes the
OcrBatch's status from their sums (summarize: pages done, failed and total; pages/s; ETA).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass


@dataclass
class Progress:
    index: int
    shards: int
    documents_total: int = 0  # documents this index owns
    documents_done: int = 0  # with a result, this run or an earlier one
    documents_failed: int = 0  # not one page read (unreadable, refused, poison, every page failed)
    documents_skipped: int = 0  # already done by an earlier run
    pages_total: int = 0  # pages of the documents opened so far (this run)
    pages_done: int = 0
    pages_failed: int = 0
    requests_shed: int = 0  # 429s waited out
    retries: int = 0  # transient failures resent
    started_at: float = 0.0  # unix seconds
    updated_at: float = 0.0
    finished: bool = False
    fatal: str | None = None
    fatal_reason: str | None = None  # contract.FATAL_REASONS, when the fatal error has one
    # The storage outage being waited out (patience.Outage.report: store, waiting_since, retries,
    # last_error), None while the storage answers.
    storage: dict | None = None

    def pages_per_second(self) -> float:
        elapsed = self.updated_at - self.started_at
        return round(self.pages_done / elapsed, 3) if elapsed > 0 else 0.0

    def to_json(self) -> bytes:
        """The report (a few hundred bytes: the fatal error is cut to 1000 characters, and the storage's
        last error is at most patience.MAX_ERROR_CHARS, so that it fits a termination message)."""
        doc = {**asdict(self), "pages_per_second": self.pages_per_second()}
        if self.fatal:
            doc["fatal"] = self.fatal[:1000]
        return json.dumps(doc, sort_keys=True).encode()


def due(now: float, last_write: float | None, interval: float) -> bool:
    """Whether a report is due: the first one at once, then at most one per interval."""
    return last_write is None or now - last_write >= interval


@dataclass(frozen=True)
class Summary:
    """The batch's progress over all its indices, as the OcrBatch status shows it."""

    documents_total: int
    documents_done: int
    documents_failed: int
    pages_total: int  # pages of the documents opened so far
    pages_done: int
    pages_failed: int
    pages_per_second: float
    eta_seconds: float | None  # None while nothing is known to extrapolate from
    indices_finished: int
    fatal: str | None  # the first index's fatal error, if any
    fatal_reason: str | None = None  # that index's reason for it (contract.FATAL_REASONS), if it gave one

    @property
    def page_summary(self) -> str:
        return f"{self.pages_done}/{self.pages_total}"


def summarize(reports: list[dict], shards: int) -> Summary:
    """Sum the progress files of a batch (any subset of its `shards` indices; a missing one has not
    reported yet). The rate is the sum of the unfinished indices' rates; the ETA extrapolates the
    pages per document seen so far to the documents not opened yet."""
    def total(key: str) -> int:
        return sum(int(r.get(key, 0)) for r in reports)

    docs_total, docs_done, docs_failed = total("documents_total"), total("documents_done"), total("documents_failed")
    pages_total, pages_done, pages_failed = total("pages_total"), total("pages_done"), total("pages_failed")
    running = [r for r in reports if not r.get("finished")]
    rate = round(sum(float(r.get("pages_per_second", 0)) for r in running), 3)
    opened = docs_done + docs_failed
    eta = None
    if rate > 0 and opened and len(reports) == shards:
        per_document = pages_total / opened
        left = pages_total - pages_done - pages_failed + per_document * (docs_total - opened)
        eta = max(0.0, round(left / rate, 1))
    first = next((r for r in sorted(reports, key=lambda r: r.get("index", 0)) if r.get("fatal")), {})
    return Summary(docs_total, docs_done, docs_failed, pages_total, pages_done, pages_failed, rate, eta,
                   sum(1 for r in reports if r.get("finished")), first.get("fatal"), first.get("fatal_reason"))


def duration(seconds: float | None) -> str:
    """12m30s, 1h05m, 45s: the ETA column's form ('' when unknown)."""
    if seconds is None:
        return ""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
