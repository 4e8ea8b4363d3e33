"""bench/engine_metrics.py: a client level's engine figures from two scrapes of the server's own
/metrics text (its real Metrics registry, rendered)."""

from __future__ import annotations

import pytest

from bench import engine_metrics
from ocr_server.runtime.metrics import Metrics


def _slots_server_metrics() -> Metrics:
    """A registry as the slots runner leaves it after one earlier page: a prefill of 1, 4 steps."""
    metrics = Metrics()
    metrics.prefill_pages.observe(1)
    metrics.engine_busy.labels("prefill").inc(0.5)
    for _ in range(4):
        metrics.batch_size.observe(1)
    metrics.engine_busy.labels("decode").inc(0.2)
    return metrics


def test_a_levels_figures_are_the_differences_between_its_two_scrapes():
    metrics = _slots_server_metrics()
    before = engine_metrics.scrape(metrics.render().decode())
    for pages in (2, 6):  # the level: two prefills of 8 pages, 10 steps of 5 rows on average
        metrics.prefill_pages.observe(pages)
    metrics.engine_busy.labels("prefill").inc(0.8)
    for rows in (8, 8, 6, 6, 5, 5, 4, 4, 2, 2):
        metrics.batch_size.observe(rows)
    metrics.engine_busy.labels("decode").inc(0.2)
    after = engine_metrics.scrape(metrics.render().decode())

    got = engine_metrics.level_figures(before, after, wall_s=2.0)
    assert got == pytest.approx({"prefills": 2, "pages_per_prefill": 4.0, "prefill_busy_ms_per_page": 100.0,
                                 "rows_per_step": 5.0, "decode_busy_ms_per_step": 20.0, "busy_share": 0.5})
    assert engine_metrics.line(got) == "engine busy 50%, 4.0 pages a prefill (100.0 ms a page), 5.0 rows a step (20.00 ms)"


def test_an_engine_that_exports_no_engine_series_gives_no_per_prefill_or_per_step_figures():
    """vLLM's engine in this server: the families exist, no series; nothing is divided by zero."""
    text = Metrics().render().decode()
    got = engine_metrics.level_figures(engine_metrics.scrape(text), engine_metrics.scrape(text), wall_s=3.0)
    assert got == {"prefills": 0.0, "busy_share": 0.0}
    assert engine_metrics.line(got) == "engine busy 0%"
