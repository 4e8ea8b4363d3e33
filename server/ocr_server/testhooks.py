"""Test hooks: faults a test can cause on cue in a real pod. Off unless TEST_HOOKS names one.

TEST_HOOKS=wedge (default `off`): the engine thread hangs, as on a GPU hang, when a batch starts
while the file WEDGE_FILE exists; the file is removed as the hook fires, so the restarted
container serves again. A test creates it with `kubectl exec <pod> -- touch /tmp/ocr-wedge` to
prove that liveness (liveness.py) restarts a wedged pod. A pod without TEST_HOOKS never looks
at the file; never set it in production.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("ocr_server.testhooks")

HOOKS = ("off", "wedge")
WEDGE_FILE = Path("/tmp/ocr-wedge")


def wedge_on_cue(run_batch: Callable[[list[Any]], list[Any]], trigger: Path = WEDGE_FILE,
                 hang: Callable[[], Any] = threading.Event().wait) -> Callable[[list[Any]], list[Any]]:
    """`run_batch`, except that a batch starting while `trigger` exists removes it and calls `hang`
    (by default: wait forever) on the engine thread instead of generating."""

    def run(items: list[Any]) -> list[Any]:
        if trigger.exists():
            trigger.unlink(missing_ok=True)
            log.warning("TEST_HOOKS=wedge: %s found, the engine thread hangs now (a test hook)", trigger)
            hang()
        return run_batch(items)

    return run
