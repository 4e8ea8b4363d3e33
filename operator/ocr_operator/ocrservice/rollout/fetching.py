"""The model-fetch init container (spec.model.source.s3), as the rollout and the status read it. Pure.

The fetcher (the server image's `python -m ocr_server.fetch`) ends a failed fetch with a
termination message whose first word is its reason, `ModelFetchFailed` or `ChecksumMismatch`;
either fails the revision at once (a failed fetch does not heal by waiting: the kubelet would only
download again), and so does the init container in CrashLoopBackOff for any other cause. While it
runs, its last log line is a JSON progress record: the ModelFetching condition and the operator's
fetch metric come from it (one pods/log read, tailLines=1, per reconcile of a fetching service).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

FETCH_CONTAINER = "model-fetch"
REASON_MODEL_FETCH_FAILED = "ModelFetchFailed"
REASON_CHECKSUM_MISMATCH = "ChecksumMismatch"
FETCH_REASONS = (REASON_MODEL_FETCH_FAILED, REASON_CHECKSUM_MISMATCH)
# The ModelFetching condition's reasons (its type: ocrservice/conditions.py).
FETCHING, FETCHED, FETCH_FAILED_REASON = "Fetching", "Fetched", "FetchFailed"
# The most of the fetcher's log read: one progress line is ~250 bytes.
LOG_LIMIT_BYTES = 4096
# While a pod fetches, the reconcile comes back this often to refresh the percentage (its pod's
# status does not change meanwhile, so no watch event would wake it).
PROGRESS_REQUEUE_SECONDS = 10.0
# The most of a progress line's "waiting" (the fetcher's S3 outage: its reason is at most 200 characters).
MAX_WAITING_CHARS = 400


@dataclass(frozen=True)
class FetchState:
    """The model-fetch init container of one pod: running, or failed (`reason`, `message`)."""

    running: bool = False
    reason: str | None = None
    message: str = ""


def fetch_state(pod: Mapping[str, Any]) -> FetchState | None:
    """The model-fetch init container's state; None when the pod has none (or has no status yet)."""
    statuses = ((pod.get("status") or {}).get("initContainerStatuses")) or []
    cs = next((s for s in statuses if s.get("name") == FETCH_CONTAINER), None)
    if cs is None:
        return None
    state = cs.get("state") or {}
    for term in (state.get("terminated") or {}, (cs.get("lastState") or {}).get("terminated") or {}):
        if term and term.get("exitCode") not in (0, None):
            message = str(term.get("message") or "").strip()
            reason = message.split(":", 1)[0]
            if reason in FETCH_REASONS:
                return FetchState(reason=reason, message=message.split(":", 1)[1].strip())
    waiting = state.get("waiting") or {}
    if waiting.get("reason") == "CrashLoopBackOff":
        return FetchState(reason=REASON_MODEL_FETCH_FAILED,
                          message=f"init container {FETCH_CONTAINER} is in CrashLoopBackOff "
                                  f"(restarts: {cs.get('restartCount') or 0}): {waiting.get('message') or ''}".rstrip(": "))
    return FetchState(running="running" in state)


@dataclass(frozen=True)
class Progress:
    percent: float
    bytes: int = 0
    total_bytes: int = 0
    files: int = 0
    total_files: int = 0
    mb_per_s: float = 0.0
    waiting: str = ""  # the fetcher waits out an S3 outage: why, and the budget left


def parse_progress(log_tail: str) -> Progress | None:
    """The fetcher's last progress line (the last line of `log_tail` that is one); None if none."""
    for line in reversed(log_tail.strip().splitlines()):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("event") in ("progress", "done"):
            try:
                return Progress(float(record.get("percent") or 0.0), int(record.get("bytes") or 0),
                                int(record.get("total_bytes") or 0), int(record.get("files") or 0),
                                int(record.get("total_files") or 0), float(record.get("mb_per_s") or 0.0),
                                str(record.get("waiting") or "")[:MAX_WAITING_CHARS])
            except (TypeError, ValueError):
                return None
    return None


def fetching_pod(pods: Iterable[Any], revision: str) -> str | None:
    """The first (by name) pod of `revision` whose model-fetch runs: the one whose log is read."""
    names = sorted(p.name for p in pods if p.revision == revision and p.fetching and not p.deleting)
    return names[0] if names else None


def condition(pod: str | None, progress: Progress | None, failed: tuple[str, str] | None) -> tuple[str, str, str]:
    """The ModelFetching condition (status, reason, message) of a service whose weights come from S3:
    True while a pod fetches (with its percentage), False once none does, or with the failure."""
    if failed is not None:
        return "False", FETCH_FAILED_REASON, f"{failed[0]}: {failed[1]}"
    if pod is None:
        return "False", FETCHED, "no pod is fetching the model"
    if progress is None:
        return "True", FETCHING, f"pod {pod} is fetching the model"
    gb = 1e9
    waiting = f"{progress.waiting}; " if progress.waiting else ""
    return "True", FETCHING, (f"pod {pod}: {waiting}{progress.percent:.1f}% ({progress.bytes / gb:.2f}/"
                              f"{progress.total_bytes / gb:.2f} GB, {progress.files}/{progress.total_files} files, "
                              f"{progress.mb_per_s:.0f} MB/s)")
