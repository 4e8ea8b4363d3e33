"""A Job index's progress report, and when to write it (pure).

Each index writes progress/index-<n>.json, replacing it, at most every `interval` seconds and
when it ends, never once per page: the operator reads the files of all indices and writes the
OcrBatch's status from their sums (pages done, failed and total; pages/s; ETA).
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
    documents_failed: int = 0  # could not be read at all
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

    def pages_per_second(self) -> float:
        elapsed = self.updated_at - self.started_at
        return round(self.pages_done / elapsed, 3) if elapsed > 0 else 0.0

    def to_json(self) -> bytes:
        return json.dumps({**asdict(self), "pages_per_second": self.pages_per_second()}, sort_keys=True).encode()


def due(now: float, last_write: float | None, interval: float) -> bool:
    """Whether a report is due: the first one at once, then at most one per interval."""
    return last_write is None or now - last_write >= interval
