"""An index's progress report and when it is written (ocr_batch_worker.progress)."""

import json

from ocr_batch_worker.progress import Progress, due, duration, summarize


def test_the_first_report_is_due_at_once_then_at_most_one_per_interval():
    assert due(100.0, None, 10)
    assert not due(105.0, 100.0, 10)
    assert due(110.0, 100.0, 10)


def test_the_report_carries_the_counts_and_the_page_rate():
    p = Progress(index=2, shards=4, pages_done=30, pages_failed=1, pages_total=40, started_at=100, updated_at=115)
    doc = json.loads(p.to_json())
    assert (doc["index"], doc["shards"], doc["pages_done"], doc["pages_total"]) == (2, 4, 30, 40)
    assert doc["pages_per_second"] == 2.0


def report(index: int, **counts) -> dict:
    return json.loads(Progress(index=index, shards=2, started_at=0, updated_at=10, **counts).to_json())


def test_the_batch_summary_adds_up_the_indices_and_extrapolates_the_eta():
    a = report(0, documents_total=4, documents_done=2, pages_total=20, pages_done=19, pages_failed=1)  # 1.9 pages/s
    b = report(1, documents_total=6, documents_done=2, documents_failed=1, pages_total=10, pages_done=10)  # 1 page/s
    s = summarize([a, b], shards=2)
    assert (s.documents_total, s.documents_done, s.documents_failed) == (10, 4, 1)
    assert (s.pages_total, s.pages_done, s.pages_failed, s.page_summary) == (30, 29, 1, "29/30")
    assert s.pages_per_second == 2.9
    # 5 documents opened with 30 pages: 6 per document; 5 more documents = 30 pages at 2.9 pages/s
    assert s.eta_seconds == round(30 / 2.9, 1)


def test_no_eta_until_every_index_has_reported_and_none_from_finished_ones():
    a = report(0, documents_total=4, documents_done=1, pages_total=5, pages_done=5)
    assert summarize([a], shards=2).eta_seconds is None
    done = {**a, "finished": True}
    assert summarize([done, {**done, "index": 1}], shards=2).pages_per_second == 0.0


def test_the_first_fatal_error_is_reported():
    a, b = report(0), {**report(1), "fatal": "the OcrService answered 401: a valid API key is required"}
    assert summarize([b, a], shards=2).fatal.startswith("the OcrService answered 401")


def test_durations_read_like_kubectls():
    assert [duration(s) for s in (None, 45, 750, 3900)] == ["", "45s", "12m30s", "1h05m"]
