"""Liveness: an engine that owes work and makes no progress past LIVENESS_STALL_SEC is wedged."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ocr_server.engines.batcher import Batcher
from ocr_server.runtime.config import ConfigError, load_config
from ocr_server.runtime.liveness import ProgressClock, is_wedged, stalled_seconds
from ocr_server.runtime.metrics import Metrics
from ocr_server.runtime.startup_checks import startup_warnings
from ocr_server.runtime.timeouts import default_liveness_stall_seconds


def test_the_stall_bound_defaults_to_twice_the_timeout_and_at_least_a_minute():
    assert default_liveness_stall_seconds(30) == 60 and default_liveness_stall_seconds(100) == 200
    assert load_config(env={}).runtime.liveness_stall_sec == 60
    assert load_config(env={"TIMEOUT_SEC": "300"}).runtime.liveness_stall_sec == 600


def test_the_stall_bound_is_a_setting_refused_out_of_range_naming_the_key():
    assert load_config(env={"LIVENESS_STALL_SEC": "5"}).runtime.liveness_stall_sec == 5
    with pytest.raises(ConfigError, match="LIVENESS_STALL_SEC=0.0 is not allowed"):
        load_config(env={"LIVENESS_STALL_SEC": "0"})
    with pytest.raises(ConfigError, match="LIVENESS_STALL_SEC='soon' is not a valid float"):
        load_config(env={"LIVENESS_STALL_SEC": "soon"})


def test_a_stall_bound_below_the_timeout_is_warned_about():
    cfg = load_config(env={"LIVENESS_STALL_SEC": "5", "TIMEOUT_SEC": "30"})
    assert any("LIVENESS_STALL_SEC=5 < TIMEOUT_SEC=30" in w for w in startup_warnings(cfg))


def test_an_idle_engine_is_never_stalled():
    assert stalled_seconds(busy=False, last_progress=0.0, now=1e6) == 0.0
    assert not is_wedged(0.0, 1.0)


def test_an_engine_owing_work_is_stalled_from_its_last_progress():
    now = [100.0]
    clock = ProgressClock(clock=lambda: now[0])
    now[0] = 500.0
    clock.work_arrived(was_idle=True)  # idle time before the work is not a stall
    now[0] = 530.0
    assert clock.stalled_for(queued=1) == 30.0
    clock.batch_started()
    now[0] = 600.0
    assert clock.stalled_for(queued=0) == 70.0 and is_wedged(70.0, 60.0)
    clock.batch_ended()
    assert clock.stalled_for(queued=0) == 0.0


def test_a_batcher_whose_generate_hangs_reports_the_stall_and_recovers_when_it_returns():
    release = threading.Event()

    def run_batch(items):
        release.wait(10)
        return [None for _ in items]

    class Item:
        deadline = float("inf")
        cancelled = threading.Event()
        request_class = "interactive"

    async def scenario() -> tuple[float, float, float]:
        batcher = Batcher(run_batch, batch_size=1, wait_s=0, metrics=Metrics(), on_fatal=lambda exc: None)
        batcher.start()
        idle = batcher.stalled_for()
        job = asyncio.ensure_future(batcher.submit(Item()))
        await asyncio.sleep(0.3)
        hung = batcher.stalled_for()
        release.set()
        await job
        done = batcher.stalled_for()
        await batcher.stop()
        return idle, hung, done

    idle, hung, done = asyncio.run(scenario())
    assert idle == 0.0 and hung >= 0.25 and done == 0.0
