"""bench/soak.py's judgement: what counts as a broken promise, and when a soak passes."""

from __future__ import annotations

import random

from bench.soak import BAD_INPUTS, Outcome, rss_growth, verdict, window_summary


def outcome(kind: str, result: str, seconds: float = 1.0) -> Outcome:
    return Outcome(at=0.0, kind=kind, result=result, seconds=seconds)


def test_a_good_request_fails_unless_answered_200():
    assert not outcome("image", "200").failed
    assert outcome("image", "429").failed
    assert outcome("stream", "503").failed


def test_a_bad_input_must_get_a_4xx_and_nothing_else():
    assert not outcome("bad", "400").failed
    assert not outcome("bad", "413").failed
    assert outcome("bad", "200").failed
    assert outcome("bad", "500").failed


def test_a_transport_error_fails_and_a_deliberate_cancel_does_not():
    assert outcome("image", "error:ReadTimeout").failed
    assert not outcome("cancel", "cancelled").failed


def test_window_summary_counts_5xx_and_takes_percentiles_of_answered_requests_only():
    w = window_summary([outcome("image", "200", 1.0), outcome("image", "200", 3.0),
                        outcome("pdf", "502", 50.0), outcome("bad", "400", 0.1)])
    assert (w["requests"], w["failed"], w["fivexx"]) == (4, 1, 1)
    assert w["latency_s"]["p99"] == 3.0
    assert w["by_kind"]["image"] == {"200": 2}


def test_rss_growth_is_measured_from_the_first_sample_to_the_last():
    assert rss_growth([100, 180, 104]) == 0.04
    assert rss_growth([100]) is None


def test_verdict_fails_on_memory_growth_restarts_or_broken_promises_and_passes_otherwise():
    clean = window_summary([outcome("image", "200")])
    assert verdict(clean, {"pod-a": 0.01}, {"pod-a": 0}, 0.05) == []
    assert "RSS grew" in verdict(clean, {"pod-a": 0.06}, {"pod-a": 0}, 0.05)[0]
    assert "restarted" in verdict(clean, {"pod-a": 0.0}, {"pod-a": 1}, 0.05)[0]
    broken = window_summary([outcome("image", "500")])
    assert "broke a promise" in verdict(broken, {"pod-a": 0.0}, {"pod-a": 0}, 0.05)[0]


def test_every_bad_input_builds_a_multipart_request():
    rng = random.Random(0)
    for make in BAD_INPUTS:
        files, data = make(rng)
        name, payload, ctype = files["file"]
        assert payload and ctype and isinstance(data, dict)
