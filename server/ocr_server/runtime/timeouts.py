"""Durations derived from the request timeout (TIMEOUT_SEC), written once so the server, its docs
and the operator's pod settings agree.

- graceful shutdown: a request admitted just before SIGTERM may run for TIMEOUT_SEC, so uvicorn
  waits that long plus a margin for the response to be written; the pod's
  terminationGracePeriodSeconds must be at least this.
- liveness: a generate batch ends within TIMEOUT_SEC (rows stop at their deadlines), so an engine
  that owes work and has made no progress for twice that (at least a minute) is wedged.
"""

from __future__ import annotations

from ocr_limits import GRACEFUL_SHUTDOWN_MARGIN_SEC, graceful_shutdown_seconds  # noqa: F401 (shared with the operator)

LIVENESS_STALL_FACTOR = 2
LIVENESS_STALL_MIN_SEC = 60.0


def default_liveness_stall_seconds(timeout_sec: float) -> float:
    """LIVENESS_STALL_SEC when unset: max(2 x TIMEOUT_SEC, 60)."""
    return max(LIVENESS_STALL_FACTOR * timeout_sec, LIVENESS_STALL_MIN_SEC)
