"""bench/batch_bench.py's verdict: the batch's throughput against a plain loop, and the interactive p95."""

from __future__ import annotations

from bench.batch_bench import figures, verdict


def report(loop: float, batch: float, alone: float, during: float) -> dict:
    return {"loop": {"pages_per_s": loop}, "batch": {"pages_per_s": batch},
            "alone": {"p95_s": alone}, "during": {"p95_s": during}}


def test_a_batch_as_fast_as_the_loop_with_interactive_p95_within_its_bound_passes():
    v = verdict(report(10.0, 9.6, 0.2, 0.29), min_throughput=0.95, max_p95_ratio=1.5)
    assert (v["passed"], v["why_failed"], v["batch_over_loop"], v["p95_during_over_alone"]) == (True, [], 0.96, 1.45)


def test_a_slow_batch_and_a_slow_interactive_p95_each_fail_naming_the_figure():
    v = verdict(report(10.0, 9.0, 0.2, 0.4), min_throughput=0.95, max_p95_ratio=1.5)
    assert not v["passed"]
    assert v["why_failed"] == ["batch pages/s 0.900x the loop's (< 0.95)",
                               "interactive p95 during the batch 2.000x alone (> 1.5)"]


def test_figures_take_the_median_and_the_95th_percentile():
    f = figures([float(i) for i in range(1, 21)])
    assert (f["p50_s"], f["p95_s"], f["n"]) == (10.5, 19.0, 20)
