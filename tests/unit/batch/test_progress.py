"""An index's progress report and when it is written (ocr_operator.batch.progress)."""

import json

from ocr_operator.batch.progress import Progress, due


def test_the_first_report_is_due_at_once_then_at_most_one_per_interval():
    assert due(100.0, None, 10)
    assert not due(105.0, 100.0, 10)
    assert due(110.0, 100.0, 10)


def test_the_report_carries_the_counts_and_the_page_rate():
    p = Progress(index=2, shards=4, pages_done=30, pages_failed=1, pages_total=40, started_at=100, updated_at=115)
    doc = json.loads(p.to_json())
    assert (doc["index"], doc["shards"], doc["pages_done"], doc["pages_total"]) == (2, 4, 30, 40)
    assert doc["pages_per_second"] == 2.0
