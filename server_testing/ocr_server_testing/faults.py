"""Faults a test causes on cue in a real server: a plugin the server loads only when SERVER_PLUGINS names it.

`SERVER_PLUGINS=ocr_server_testing.faults`: the engine thread hangs, as on a GPU hang, when a batch
starts (or pages join the slots decoder) while WEDGE_FILE exists; the file is removed as the fault
fires, so the restarted container serves again. A test creates it with
`kubectl exec <pod> -- touch /tmp/ocr-wedge` to prove that liveness restarts a wedged pod
(tests/e2e/test_realnode_faults.py).

`OCR_STEP_PAUSE_SEC` (0 to 1, default 0): each step of the slots decoder takes that much longer, as
on a slower accelerator, so a request of N new tokens lasts at least N times it on any machine (a
test's request that must outlast its pod's SIGTERM by a margin cannot be made long by tokens alone:
the tiny model's context caps them, and a quiet machine decodes them in a few seconds).

The production image does not contain this package; the test image (server_tiny) does.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Callable, Mapping

from ocr_server.runtime.config import ConfigError
from ocr_server.runtime.plugins import EngineHooks

log = logging.getLogger("ocr_server_testing.faults")

WEDGE_FILE = Path(os.environ.get("OCR_WEDGE_FILE", "/tmp/ocr-wedge"))  # a test on one machine may name its own
STEP_PAUSE_ENV, MAX_STEP_PAUSE_SEC = "OCR_STEP_PAUSE_SEC", 1.0


def wedge_on_cue(trigger: Path = WEDGE_FILE, hang: Callable[[], object] = threading.Event().wait) -> Callable[[], None]:
    """A hook for the engine thread: when `trigger` exists, remove it and call `hang` (by default:
    wait forever) instead of returning, so the batch that was about to run never starts."""

    def check() -> None:
        if trigger.exists():
            trigger.unlink(missing_ok=True)
            log.warning("%s found: the engine thread hangs now (the wedge fault of a test plugin)", trigger)
            hang()

    return check


def step_pause_seconds(env: Mapping[str, str]) -> float:
    """OCR_STEP_PAUSE_SEC as seconds (0 when unset); ConfigError naming it when not a number in 0..1."""
    text = env.get(STEP_PAUSE_ENV, "").strip()
    try:
        seconds = float(text) if text else 0.0
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_STEP_PAUSE_SEC:  # NaN too
        raise ConfigError(f"{STEP_PAUSE_ENV}={text!r} is not allowed: seconds from 0 to {MAX_STEP_PAUSE_SEC:g}")
    return seconds


def install(hooks: EngineHooks, env: Mapping[str, str] = os.environ) -> None:
    """The plugin entry the server calls: arm the wedge fault, and pace the decode steps when
    OCR_STEP_PAUSE_SEC asks for it."""
    log.warning("the wedge fault is armed: creating %s hangs the engine thread (a test plugin; never in production)",
                WEDGE_FILE)
    hooks.before_work.append(wedge_on_cue())
    pause = step_pause_seconds(env)
    if pause > 0:
        log.warning("each decode step pauses %gs (%s of a test plugin; never in production)", pause, STEP_PAUSE_ENV)
        hooks.after_step.append(lambda: time.sleep(pause))
