"""Faults a test causes on cue in a real server: a plugin the server loads only when SERVER_PLUGINS names it.

`SERVER_PLUGINS=ocr_server_testing.faults`: the engine thread hangs, as on a GPU hang, when a batch
starts (or pages join the slots decoder) while WEDGE_FILE exists; the file is removed as the fault
fires, so the restarted container serves again. A test creates it with
`kubectl exec <pod> -- touch /tmp/ocr-wedge` to prove that liveness restarts a wedged pod
(tests/e2e/test_realnode_faults.py). The production image does not contain this package; the test
image (server_tiny) does.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable

from ocr_server.runtime.plugins import EngineHooks

log = logging.getLogger("ocr_server_testing.faults")

WEDGE_FILE = Path(os.environ.get("OCR_WEDGE_FILE", "/tmp/ocr-wedge"))  # a test on one machine may name its own


def wedge_on_cue(trigger: Path = WEDGE_FILE, hang: Callable[[], object] = threading.Event().wait) -> Callable[[], None]:
    """A hook for the engine thread: when `trigger` exists, remove it and call `hang` (by default:
    wait forever) instead of returning, so the batch that was about to run never starts."""

    def check() -> None:
        if trigger.exists():
            trigger.unlink(missing_ok=True)
            log.warning("%s found: the engine thread hangs now (the wedge fault of a test plugin)", trigger)
            hang()

    return check


def install(hooks: EngineHooks) -> None:
    """The plugin entry the server calls: arm the wedge fault."""
    log.warning("the wedge fault is armed: creating %s hangs the engine thread (a test plugin; never in production)",
                WEDGE_FILE)
    hooks.before_work.append(wedge_on_cue())
