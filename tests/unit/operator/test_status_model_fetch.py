"""The status of an OcrService whose weights come from S3: the ModelFetching condition and
status.modelFetch while a pod fetches (ocrservice/fetchprogress.py's report)."""

from __future__ import annotations

from ocr_operator.ocrservice.fetchprogress import FetchReport
from ocr_operator.ocrservice.rollout.fetching import Progress, condition

from .helpers import owner
from .test_status import build, cond

PROGRESS = Progress(42.5, 2_900_000_000, 6_800_000_000, 3, 7, 180.0)


def test_a_fetching_pod_shows_in_the_model_fetching_condition_and_in_status_model_fetch():
    st, _ = build(owner({}), fetch=FetchReport(condition("ocr-1", PROGRESS, None), "ocr-1", PROGRESS))
    c = cond(st, "ModelFetching")
    assert (c["status"], c["reason"]) == ("True", "Fetching") and "42.5%" in c["message"]
    assert st["modelFetch"] == {"pod": "ocr-1", "percent": 42.5, "bytes": 2_900_000_000,
                                "totalBytes": 6_800_000_000, "files": 3, "totalFiles": 7}


def test_once_no_pod_fetches_the_condition_says_fetched_and_status_model_fetch_goes():
    old, _ = build(owner({}), fetch=FetchReport(condition("ocr-1", PROGRESS, None), "ocr-1", PROGRESS))
    st, _ = build(owner({}, status=old), fetch=FetchReport(condition(None, None, None)))
    assert cond(st, "ModelFetching")["reason"] == "Fetched" and "modelFetch" not in st


def test_a_service_without_weights_from_s3_has_no_model_fetching_condition():
    st, _ = build(owner({}))
    assert cond(st, "ModelFetching") is None and "modelFetch" not in st
