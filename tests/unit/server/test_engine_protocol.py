"""The engine protocol is complete and typed: every engine has all of it, nothing in it is Any."""

from __future__ import annotations

import asyncio
import typing

import pytest

from ocr_server.engines.api import OcrEngine, Runner
from ocr_server.engines.batcher import Batcher
from ocr_server.engines.transformers.engine import Engine
from ocr_server.engines.transformers.slot_runner import SlotRunner
from ocr_server.engines.vllm.engine import VllmEngine, VllmRunner
from ocr_server.runtime.config import load_config
from ocr_server.runtime.metrics import Metrics
from ocr_server.serving.schema import OcrOptions, OcrResponse
from ocr_server.serving.service import OcrServing
from ocr_server_testing.stand_in import StandInEngine
from tests.server import samples


def _members(protocol: type) -> set[str]:
    return {name for name in vars(protocol) if not name.startswith("_")} | set(typing.get_type_hints(protocol))


def _hints(protocol: type) -> list[object]:
    out: list[object] = list(typing.get_type_hints(protocol).values())
    for name in _members(protocol):
        member = vars(protocol).get(name)
        if isinstance(member, property):
            member = member.fget
        if callable(member):
            out += typing.get_type_hints(member).values()
    return out


def _mentions_any(hint: object) -> bool:
    return hint is typing.Any or any(_mentions_any(arg) for arg in typing.get_args(hint))


@pytest.mark.parametrize("protocol", [OcrEngine, Runner])
def test_no_annotation_of_the_protocol_is_any(protocol):
    hints = _hints(protocol)
    assert hints and not [h for h in hints if _mentions_any(h)]


def _methods(protocol: type) -> set[str]:
    return {name for name, member in vars(protocol).items() if not name.startswith("_") and callable(member)}


@pytest.mark.parametrize("engine", [Engine, VllmEngine, StandInEngine])
def test_every_engine_has_every_method_of_the_engine_protocol(engine):
    methods = _methods(OcrEngine)
    assert {"prepare", "runner", "check_prompt", "decoder_report", "capture_graphs"} <= methods
    assert not [m for m in methods if not callable(getattr(engine, m, None))]


@pytest.mark.parametrize("runner", [Batcher, SlotRunner, VllmRunner])
def test_every_runner_has_every_method_of_the_runner_protocol(runner):
    methods = _methods(Runner)
    assert {"submit", "on_engine_thread", "stalled_for"} <= methods
    assert not [m for m in methods if not callable(getattr(runner, m, None))]


def test_the_service_answers_a_typed_response_whose_json_is_the_documented_one():
    async def scenario() -> OcrResponse:
        cfg = load_config(env={"CONCURRENCY": "1", "BATCH_WAIT_MS": "0"})
        engine = StandInEngine(cfg, generate_sec=0.01)
        engine.load()
        serving = OcrServing(cfg, engine, Metrics())
        serving.start(on_fatal=lambda exc: None)
        serving.mark_ready()
        try:
            return await serving.ocr(samples.png(64, 64), OcrOptions())
        finally:
            await serving.stop()

    response = asyncio.run(scenario())
    assert isinstance(response, OcrResponse) and response.raw == "stand-in output"
    assert response.pages[0].usage.generated_tokens == 2 and response.model.name == "stand-in (no model)"
    assert OcrResponse.model_validate(response.model_dump()) == response
