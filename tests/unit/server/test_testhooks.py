"""The wedge test hook: off by default, and when on it hangs the engine thread only on cue."""

from __future__ import annotations

import threading

import pytest

from ocr_server.runtime.config import ConfigError, load_config, startup_warnings
from ocr_server.engines.api import make_runner
from ocr_server.runtime.metrics import Metrics
from ocr_server.testhooks import wedge_on_cue


class _Engine:
    def generate_batch(self, items):
        return [f"out-{i}" for i in items]


def test_hooks_are_off_by_default_and_the_batcher_runs_the_engine_itself():
    cfg = load_config(env={})
    assert cfg.runtime.test_hooks == "off"
    engine = _Engine()
    runner = make_runner(engine, cfg, Metrics(), on_fatal=lambda exc: None)
    assert runner.run_batch == engine.generate_batch
    assert not any("TEST_HOOKS" in w for w in startup_warnings(cfg))


def test_an_unknown_hook_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="TEST_HOOKS='hang' is not allowed: off or wedge"):
        load_config(env={"TEST_HOOKS": "hang"})


def test_the_wedge_hook_is_warned_about_at_start_and_wraps_the_engine():
    cfg = load_config(env={"TEST_HOOKS": "wedge"})
    assert any("TEST_HOOKS=wedge" in w and "never set it in production" in w for w in startup_warnings(cfg))
    engine = _Engine()
    runner = make_runner(engine, cfg, Metrics(), on_fatal=lambda exc: None)
    assert runner.run_batch != engine.generate_batch


def test_without_the_trigger_file_batches_run_as_usual(tmp_path):
    run = wedge_on_cue(_Engine().generate_batch, trigger=tmp_path / "ocr-wedge",
                       hang=lambda: pytest.fail("hung without the trigger file"))
    assert run([1, 2]) == ["out-1", "out-2"]


def test_the_trigger_file_hangs_the_batch_once_and_is_removed(tmp_path):
    trigger = tmp_path / "ocr-wedge"
    trigger.touch()
    release, hanging = threading.Event(), threading.Event()

    def hang() -> None:
        hanging.set()
        release.wait(10)

    run = wedge_on_cue(_Engine().generate_batch, trigger=trigger, hang=hang)
    worker = threading.Thread(target=run, args=([1],))
    worker.start()
    try:
        assert hanging.wait(5)
        worker.join(0.3)
        assert worker.is_alive() and not trigger.exists()
    finally:
        release.set()
        worker.join(5)
    assert run([2]) == ["out-2"]  # the file is gone: the next batch generates
