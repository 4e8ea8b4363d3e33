"""Shadow pages' decisions (serving/shadow.py): which answers are copied, the arm's bounds, the
target's form, what one copy's record holds, and the queue's bound. Pure, or one event loop."""

from __future__ import annotations

import asyncio
import json

import pytest
from pydantic import ValidationError

from ocr_limits.quality import MAX_SHADOW_PAGES, MAX_SHADOW_QUEUE_PAGES
from ocr_server.runtime.metrics import Metrics
from ocr_server.serving.schema import ModelOut, OcrOptions, OcrResponse, Usage
from ocr_server.serving.shadow import (
    NO_RETENTION,
    NOT_DRAWN,
    NOT_OK,
    SAMPLED,
    STREAM,
    Answer,
    Copy,
    Shadow,
    ShadowArm,
    check_target,
    decide,
    judge,
)

PLAIN = {"content-type": "application/json"}


def _decide(headers=PLAIN, *, percent=100, gate=False, stream=False, status=200, draw=0.0):
    return decide(percent, headers, gate=gate, stream=stream, status=status, draw=draw)


def test_an_answer_is_sampled_with_probability_sample_percent():
    assert _decide(percent=25, draw=0.2499) == SAMPLED
    assert _decide(percent=25, draw=0.25) == NOT_DRAWN
    assert _decide(percent=100, draw=0.9999) == SAMPLED


def test_a_request_with_cache_control_no_store_is_never_sampled():
    assert _decide({"cache-control": "max-age=0, No-Store"}) == NO_RETENTION


def test_a_request_with_x_ocr_retention_none_is_never_sampled():
    assert _decide({"x-ocr-retention": "None"}) == NO_RETENTION
    assert _decide({"x-ocr-retention": "default"}) == SAMPLED


def test_a_streamed_answer_is_skipped_as_stream():
    assert _decide(stream=True) == STREAM


def test_an_answer_other_than_200_is_skipped_as_not_ok():
    assert _decide(status=429) == NOT_OK


def test_a_request_with_the_gate_key_is_not_considered_at_all():
    assert _decide(gate=True) is None


def test_a_shadow_copy_is_not_considered_at_all():
    assert _decide({"x-ocr-shadow": "copy"}) is None


def _arm(**changes):
    body = {"id": "attempt-1", "target": "http://10.0.0.7:8080", "samplePercent": 10, "maxPages": 32,
            "maxSeconds": 300, "noisePages": 2, "timeoutSeconds": 120, **changes}
    return ShadowArm.model_validate(body)


@pytest.mark.parametrize("field, value", [("samplePercent", 0), ("samplePercent", 101), ("maxPages", 0),
                                          ("maxPages", MAX_SHADOW_PAGES + 1), ("maxSeconds", 9), ("maxSeconds", 3601),
                                          ("noisePages", 9), ("timeoutSeconds", 601), ("id", ""), ("id", "x" * 129),
                                          ("samplePercent", "10"), ("unknown", 1)])
def test_an_arm_outside_its_bounds_or_with_an_unknown_key_is_refused(field, value):
    with pytest.raises(ValidationError):
        _arm(**{field: value})


def test_an_arm_within_its_bounds_is_taken_with_camel_case_names():
    arm = _arm(samplePercent=100, maxPages=MAX_SHADOW_PAGES, noisePages=0)
    assert (arm.sample_percent, arm.max_pages, arm.noise_pages) == (100, MAX_SHADOW_PAGES, 0)


@pytest.mark.parametrize("url", ["http://ocr.team.svc:8080", "http://localhost:8080", "ftp://10.0.0.7:21",
                                 "http://10.0.0.7", "http://10.0.0.7:8080/v1", "http://10.0.0.7:8080/",
                                 "http://u:p@10.0.0.7:8080", "http://10.0.0.7:8080?x=1", "http://10.0.0.7:8080#f",
                                 "http://fd00::7:8080", "http://10.0.0.7:99999", "http://[fe80::1%25eth0]:8080"])
def test_a_target_other_than_scheme_ip_literal_and_port_is_refused(url):
    with pytest.raises(ValueError):
        check_target(url)


def test_a_target_of_an_ipv4_or_bracketed_ipv6_literal_is_taken_in_one_form():
    assert check_target("https://10.0.0.7:8443") == "https://10.0.0.7:8443"
    assert check_target("http://[FD00:0::7]:8080") == "http://[fd00::7]:8080"


def _response(text: str, outcome: str = "ok") -> OcrResponse:
    page = {"page": 1, "text": text, "raw": text, "blocks": [], "layout": {
        "image_size": [1, 1], "global_view": [1, 1], "crop_size": [1, 1], "crop_grid": [0, 0], "crops": 0,
        "visual_tokens": 256}, "usage": {"visual_tokens": 256, "generated_tokens": 3, "pages": 1, "prompt_tokens": 1},
        "finished": True, "outcome": outcome}
    return OcrResponse(text=text, raw=text, blocks=[], layout=page["layout"], pages=[page],
                       usage=Usage(visual_tokens=256, generated_tokens=3, pages=1, prompt_tokens=1), timings={},
                       model=ModelOut(name="m", revision="r"), cached=False, format="png")


def test_a_copys_record_holds_hashes_distance_and_outcomes_and_no_text():
    copy = Copy.of(b"page", OcrOptions(), _response("Invoice 42 total"))
    answer = Answer(200, json.dumps({"text": "Invoice 43 total", "pages": [{"outcome": "truncated"}]}).encode())
    record = judge(copy, "d" * 64, answer, 0.5)
    assert record["distance"] == 0.0625 and record["candidateOutcome"] == "truncated"
    assert record["servingOutcome"] == "ok" and record["error"] is None and record["status"] is None
    assert "Invoice" not in json.dumps(record)


def test_a_candidate_error_status_is_distance_one_and_no_answer_is_unjudged():
    copy = Copy.of(b"page", OcrOptions(), _response("text"))
    assert judge(copy, "d" * 64, Answer(500, b"{}"), 0.1)["distance"] == 1.0
    unjudged = judge(copy, "d" * 64, Answer(error="timeout"), 5.0)
    assert unjudged["distance"] is None and unjudged["error"] == "timeout"


def test_copies_beyond_the_queue_bound_are_dropped_and_counted_as_queue_full():
    async def run():
        shadow = Shadow(replay=None, metrics=Metrics())  # type: ignore[arg-type]
        await shadow.arm(_arm(samplePercent=100, maxPages=MAX_SHADOW_PAGES, target="http://127.0.0.1:9"), "gk")
        tickets = [shadow.consider(PLAIN, gate=False, stream=False, status=200) for _ in range(MAX_SHADOW_QUEUE_PAGES + 1)]
        for ticket in tickets:  # no await yields inside enqueue: the worker takes none meanwhile
            await shadow.enqueue(ticket, b"page", OcrOptions(), _response("t"))
        report = shadow.report()
        await shadow.disarm()
        return report

    report = asyncio.run(run())
    assert report["sampled"] == MAX_SHADOW_QUEUE_PAGES + 1
    assert report["skipped"]["queueFull"] == 1 and report["pending"] == MAX_SHADOW_QUEUE_PAGES


def test_sampling_stops_once_max_pages_copies_are_taken():
    async def run():
        shadow = Shadow(replay=None, metrics=Metrics())  # type: ignore[arg-type]
        await shadow.arm(_arm(samplePercent=100, maxPages=2, target="http://127.0.0.1:9"), "gk")
        taken = [shadow.consider(PLAIN, gate=False, stream=False, status=200) is not None for _ in range(3)]
        report = shadow.report()
        await shadow.disarm()
        return taken, report

    taken, report = asyncio.run(run())
    assert taken == [True, True, False] and report["armed"] is False and report["seen"] == 2
