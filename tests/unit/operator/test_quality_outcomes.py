"""The quality gate's reference-free criteria (maxLoopRate, maxTruncatedRate, maxEmptyRate) on
the server's page outcomes: the pure verdict and the failure the rollout fails the revision with."""

from __future__ import annotations

from ocr_operator import spec as S
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import outcomes as OC
from ocr_operator.ocrservice.rollout import verdict as V
from tests.unit.operator.test_quality import gate_job, pages, rolling

BASE = dict(config_map="golden", max_mean_distance=0.05, max_page_distance=0.2)


def outs(**pages_: tuple[str, str | None]) -> tuple[V.Output, ...]:
    return tuple(V.Output.of(p.replace("_", "."), text, 7, outcome) for p, (text, outcome) in pages_.items())


def baseline(texts=("hello", "world")) -> V.Recording:
    return V.Recording("old", pages().digest, outs(a_png=(texts[0], None), b_png=(texts[1], None)))


def test_a_loop_rate_over_max_loop_rate_fails_naming_the_signal_the_rate_and_the_page():
    gate = S.QualityGate(**BASE, max_loop_rate=0.25)
    v = V.judge(outs(a_png=("hello", "ok"), b_png=("world", "loop")), pages(), baseline(), gate)
    assert not v.passed and v.signal == "maxLoopRate"
    assert v.message.startswith("maxLoopRate: loop rate 0.5000 > 0.25 (1 of 2 pages loop: b.png)"), v.message
    assert v.mean == 0.0  # the distances are still measured and reported


def test_rates_at_their_maximum_pass_and_are_summarised():
    gate = S.QualityGate(**BASE, max_loop_rate=0.5, max_truncated_rate=0.5, max_empty_rate=0.5)
    v = V.judge(outs(a_png=("hello", "truncated"), b_png=("world", "loop")), pages(), baseline(), gate)
    assert v.passed and v.signal is None
    assert "loop rate 0.5000 (maxLoopRate 0.5); truncated rate 0.5000 (maxTruncatedRate 0.5)" in v.message


def test_truncated_and_empty_rates_fail_on_their_own_criterion():
    truncated = S.QualityGate(**BASE, max_truncated_rate=0)
    v = V.judge(outs(a_png=("hello", "truncated"), b_png=("world", "ok")), pages(), baseline(), truncated)
    assert not v.passed and v.signal == "maxTruncatedRate"
    empty = S.QualityGate(**BASE, max_empty_rate=0.4)
    v = V.judge(outs(a_png=("", "empty"), b_png=("world", "ok")), pages(), None, empty)
    assert not v.passed and v.signal == "maxEmptyRate" and "1 of 2 pages empty: a.png" in v.message


def test_a_first_revision_with_nothing_to_compare_is_still_judged_on_its_rates():
    gate = S.QualityGate(**BASE, max_loop_rate=0.0)
    v = V.judge(outs(a_png=("x", "loop"), b_png=("y", "loop")), pages(), None, gate)
    assert not v.passed and v.signal == "maxLoopRate" and "nothing to compare" in v.message


def test_without_rate_criteria_outcomes_change_nothing():
    v = V.judge(outs(a_png=("hello", "loop"), b_png=("world", "loop")), pages(), baseline(), S.QualityGate(**BASE))
    assert v.passed and "rate" not in v.message


def test_a_server_that_reports_no_outcome_leaves_the_rates_unjudged_and_says_so():
    gate = S.QualityGate(**BASE, max_loop_rate=0.0)
    v = V.judge(outs(a_png=("hello", None), b_png=("world", None)), pages(), baseline(), gate)
    assert v.passed and "outcome rates not judged: the server reported no page outcome" in v.message


def test_an_answer_of_several_pages_takes_its_worst_pages_outcome():
    assert OC.answer_outcome([{"outcome": "ok"}, {"outcome": "empty"}, {"outcome": "truncated"}]) == "truncated"
    assert OC.answer_outcome([{"outcome": "loop"}, {"outcome": "ok"}]) == "loop"
    assert OC.answer_outcome([{"page": 1}]) is None and OC.answer_outcome(None) is None


def test_a_gate_run_over_max_loop_rate_fails_the_revision_with_quality_regression_naming_the_signal():
    gate = S.QualityGate(**BASE, max_loop_rate=0.1)
    result = G.Result(gate_job(), outs(a_png=("hello", "loop"), b_png=("world", "ok")), seconds=1.0)
    out = G.conclude(G.GateInputs(gate, pages(), V.Records(baseline()), None, result), rolling())
    assert out.failure.reason == G.REASON_QUALITY_REGRESSION
    assert out.failure.message.startswith("maxLoopRate: loop rate 0.5000 > 0.1")
    assert out.record["reason"] == G.REASON_QUALITY_REGRESSION and out.record["message"] == out.failure.message
