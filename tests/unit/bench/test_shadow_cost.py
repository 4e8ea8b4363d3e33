"""bench/shadow_cost.py reads one request's send time back from /metrics and sums up its figures."""

from __future__ import annotations

import pytest

from bench.shadow_cost import send_seconds, summary
from ocr_server.runtime.metrics import Metrics


def test_the_bench_reads_the_send_histograms_sum_and_count_per_shadow_label():
    metrics = Metrics()
    metrics.answer_send.labels("sampled").observe(0.002)
    metrics.answer_send.labels("sampled").observe(0.003)
    metrics.answer_send.labels("none").observe(0.001)
    text = metrics.render().decode()
    assert send_seconds(text, "sampled") == (pytest.approx(0.005), 2.0)
    assert send_seconds(text, "none") == (pytest.approx(0.001), 1.0)


def test_the_summary_gives_mean_nearest_rank_p95_and_max_in_milliseconds():
    seconds = [i / 1000 for i in range(1, 21)]  # 1..20 ms
    assert summary(seconds) == {"mean_ms": 10.5, "p95_ms": 19.0, "max_ms": 20.0}
