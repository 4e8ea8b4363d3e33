"""Plugins (SERVER_PLUGINS): none by default; the test suite's wedge fault hangs the engine thread only on cue,
and its step pause (OCR_STEP_PAUSE_SEC) paces the slots decoder's steps."""

from __future__ import annotations

import asyncio
import threading
import time
import types

import pytest

from ocr_server.engines.batcher import Batcher
from ocr_server.engines.scheduling import ClassQueue
from ocr_server.engines.transformers.slot_runner import SlotRunner, _Pending
from ocr_server.runtime.config import ConfigError, load_config
from ocr_server.runtime.metrics import Metrics
from ocr_server.runtime.plugins import EngineHooks, load_plugins
from ocr_server.runtime.startup_checks import startup_warnings
from ocr_server_testing.faults import install, wedge_on_cue

FAULTS = "ocr_server_testing.faults"


class _Engine:
    def generate_batch(self, items):
        return [f"out-{i}" for i in items]


def test_no_plugin_is_loaded_by_default_and_none_is_warned_about():
    cfg = load_config(env={})
    assert cfg.runtime.plugins == ()
    assert load_plugins(cfg.runtime.plugins).before_work == []
    assert not any("SERVER_PLUGINS" in w for w in startup_warnings(cfg))


def test_a_plugin_name_that_is_no_module_name_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="SERVER_PLUGINS='not a module' is not allowed: comma-separated module names"):
        load_config(env={"SERVER_PLUGINS": "not a module"})


def test_a_plugin_that_cannot_be_imported_or_has_no_install_stops_the_start_naming_the_setting():
    with pytest.raises(ConfigError, match="SERVER_PLUGINS: no_such_plugin_module cannot be imported"):
        load_plugins(["no_such_plugin_module"])
    with pytest.raises(ConfigError, match=r"SERVER_PLUGINS: json has no install\(hooks\) function"):
        load_plugins(["json"])


def test_the_fault_plugin_is_warned_about_at_start_and_installs_its_hook():
    cfg = load_config(env={"SERVER_PLUGINS": FAULTS})
    assert cfg.runtime.plugins == (FAULTS,)
    assert any(f"SERVER_PLUGINS={FAULTS}" in w and "never set it in production" in w for w in startup_warnings(cfg))
    assert len(load_plugins(cfg.runtime.plugins).before_work) == 1


def test_the_batcher_runs_the_hooks_on_the_engine_thread_before_each_batch():
    seen: list[str] = []
    hooks = EngineHooks([lambda: seen.append(threading.current_thread().name)])

    async def run() -> list[str]:
        batcher = Batcher(_Engine().generate_batch, batch_size=4, wait_s=0, metrics=Metrics(),
                          on_fatal=lambda exc: None, hooks=hooks)
        batcher.start()
        try:
            return [await batcher.submit(_Item(n)) for n in (1, 2)]
        finally:
            await batcher.stop()

    out = asyncio.run(run())
    assert out == ["out-1", "out-2"]
    assert len(seen) == 2 and all(name.startswith("engine") for name in seen)


class _Item:
    def __init__(self, n: int) -> None:
        self.n, self.deadline, self.cancelled, self.request_class = n, float("inf"), threading.Event(), "interactive"

    def __str__(self) -> str:
        return str(self.n)


def test_without_the_trigger_file_the_hook_returns_at_once(tmp_path):
    check = wedge_on_cue(trigger=tmp_path / "ocr-wedge", hang=lambda: pytest.fail("hung without the trigger file"))
    check()


def test_the_trigger_file_hangs_the_engine_thread_once_and_is_removed(tmp_path):
    trigger = tmp_path / "ocr-wedge"
    trigger.touch()
    release, hanging = threading.Event(), threading.Event()
    hangs: list[int] = []

    def hang() -> None:
        hangs.append(1)
        hanging.set()
        release.wait(10)

    check = wedge_on_cue(trigger=trigger, hang=hang)
    worker = threading.Thread(target=check)
    worker.start()
    try:
        assert hanging.wait(5)
        worker.join(0.3)
        assert worker.is_alive() and not trigger.exists()
    finally:
        release.set()
        worker.join(5)
    check()  # the file is gone: the next batch runs
    assert len(hangs) == 1


def test_without_a_step_pause_the_fault_plugin_installs_no_step_hook():
    hooks = EngineHooks()
    install(hooks, env={})
    assert len(hooks.before_work) == 1 and hooks.after_step == []


def test_the_step_pause_makes_each_step_hook_take_that_long():
    hooks = EngineHooks()
    install(hooks, env={"OCR_STEP_PAUSE_SEC": "0.05"})
    assert len(hooks.after_step) == 1
    t0 = time.monotonic()
    hooks.run_after_step()
    assert time.monotonic() - t0 >= 0.05


@pytest.mark.parametrize("value", ["-0.1", "1.5", "abc", "nan", "inf"])
def test_a_step_pause_that_is_not_seconds_from_0_to_1_is_refused_naming_the_setting(value):
    with pytest.raises(ConfigError, match=f"OCR_STEP_PAUSE_SEC='{value}' is not allowed: seconds from 0 to 1"):
        install(EngineHooks(), env={"OCR_STEP_PAUSE_SEC": value})


class _Slots:
    """A slots decoder whose one row ends after `steps` steps."""

    def __init__(self, steps: int) -> None:
        self.plan, self.rows, self.left = types.SimpleNamespace(slots=1, prefill_pages=1), {}, steps

    def free_slots(self) -> int:
        return 0 if self.rows else 1

    def prefill(self, items):
        self.rows = {0: items[0]}
        yield

    def step(self):
        self.left -= 1
        if self.left:
            return []
        self.rows = {}
        return ["ended"]

    def idle(self) -> bool:
        return not self.rows


def test_the_slots_runner_calls_the_step_hooks_after_each_step_once_its_ended_rows_are_answered():
    slots, seen = _Slots(steps=5), []
    engine = types.SimpleNamespace(slots=slots, cfg=types.SimpleNamespace(runtime=types.SimpleNamespace(prefill_share=0.5)))
    hooks = EngineHooks(after_step=[lambda: seen.append(f"hook after step {5 - slots.left}")])
    runner = SlotRunner(engine, metrics=Metrics(), on_fatal=lambda exc: None, hooks=hooks)
    runner._answer = lambda ended: seen.append(f"answered {ended}")
    item = types.SimpleNamespace(request_class="interactive", deadline=time.monotonic() + 60, cancelled=threading.Event())
    runner.inbox = ClassQueue()
    runner.inbox.append(_Pending(item, types.SimpleNamespace(done=lambda: False)), "interactive")
    runner._drive()
    assert seen == [f"hook after step {n}" for n in range(1, 5)] + ["answered ended", "hook after step 5"]
