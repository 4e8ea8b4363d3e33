"""What the fetch tells: JSON lines on stdout (the pod's log; the operator reads the last one for
the OcrService's ModelFetching condition) and, when it ends in failure, the termination message.

A progress line:
    {"event": "progress", "percent": 42.0, "bytes": ..., "total_bytes": ..., "files": 3, "total_files": 7,
     "mb_per_s": 180.5, "seconds": 12.3}
While the store is down (an outage the fetch waits out, fetcher.py), each failed try writes a
progress line with "waiting" (what the operator's ModelFetching condition shows) and "outage":
    {"event": "progress", ..., "waiting": "waiting for S3: 503 from http://s3:7070; retry 3, 4s waited,
     296s of the 300s outage budget left", "outage": {"reason": "503 from http://s3:7070", "retries": 3,
     "waited_seconds": 4.0, "budget_left_seconds": 296.0, "budget_seconds": 300.0}}
The last line is `"event": "done"` (with "cache": "hit" or "miss") or `"event": "failed"` (with
"reason" and "message"). The termination message is `<Reason>: <message>` (at most 4 KiB, the
kubelet's bound), the reason first so that `kubectl describe pod` and the operator read it alike.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

TERMINATION_LOG = Path("/dev/termination-log")
MESSAGE_LIMIT = 4096


def termination_message(reason: str, message: str) -> str:
    text = f"{reason}: {message}"
    return text if len(text.encode()) <= MESSAGE_LIMIT else text.encode()[:MESSAGE_LIMIT - 3].decode(errors="ignore") + "..."


class Reporter:
    def __init__(self, out: TextIO | None = None, every: float = 2.0, termination_log: Path | None = TERMINATION_LOG) -> None:
        self.out = out or sys.stdout
        self.every = every
        self.termination_log = termination_log
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.total_bytes = self.total_files = 0
        self.bytes = self.files = 0
        self.last_line = 0.0
        self.last_bytes_at = self.started_at = time.monotonic()
        self.ended = False  # the last line ("done" or "failed") is written: transfer threads still
        # running (a failure does not wait for them) write nothing after it

    def emit(self, event: str, **fields) -> None:
        line = json.dumps({"event": event, **fields}, sort_keys=False)
        with self.lock:
            if self.ended:
                return
            self.ended = event in ("done", "failed")
            print(line, file=self.out, flush=True)

    def _numbers(self) -> dict:
        seconds = time.monotonic() - self.t0
        percent = 100.0 * self.bytes / self.total_bytes if self.total_bytes else 100.0
        return {"percent": round(min(percent, 100.0), 1), "bytes": self.bytes, "total_bytes": self.total_bytes,
                "files": self.files, "total_files": self.total_files,
                "mb_per_s": round(self.bytes / 1e6 / seconds, 1) if seconds > 0 else 0.0,
                "seconds": round(seconds, 1)}

    def start(self, total_bytes: int, total_files: int, done_bytes: int, done_files: int) -> None:
        self.total_bytes, self.total_files = total_bytes, total_files
        self.bytes, self.files = done_bytes, done_files
        self.emit("progress", **self._numbers())

    def add_bytes(self, n: int) -> None:
        now = time.monotonic()
        with self.lock:
            self.bytes += n
            self.last_bytes_at = now
            due = now - self.last_line >= self.every
            if due:
                self.last_line = now
        if due:
            self.emit("progress", **self._numbers())

    def file_done(self, name: str) -> None:
        with self.lock:
            self.files += 1
        self.emit("progress", **self._numbers(), file=name)

    def stalled_for(self) -> float:
        return time.monotonic() - max(self.last_bytes_at, self.started_at)

    def restarted(self) -> None:
        """A download starts again (after an outage): the stall bound counts from now."""
        with self.lock:
            self.started_at = time.monotonic()

    def waiting_for_store(self, reason: str, retries: int, waited: float, left: float, budget: float) -> None:
        message = (f"waiting for S3: {reason}; retry {retries}, {waited:.0f}s waited, "
                   f"{max(left, 0.0):.0f}s of the {budget:.0f}s outage budget left")
        self.emit("progress", **self._numbers(), waiting=message, outage={
            "reason": reason, "retries": retries, "waited_seconds": round(waited, 1),
            "budget_left_seconds": round(max(left, 0.0), 1), "budget_seconds": budget})

    def done(self, **fields) -> None:
        self.emit("done", **self._numbers(), **fields)

    def failed(self, reason: str, message: str) -> None:
        self.emit("failed", reason=reason, message=message, **self._numbers())
        if self.termination_log is not None:
            try:
                self.termination_log.write_text(termination_message(reason, message))
            except OSError as exc:
                print(f"cannot write {self.termination_log}: {exc}", file=sys.stderr)
