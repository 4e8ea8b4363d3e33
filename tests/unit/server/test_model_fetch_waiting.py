"""Which failures of the store the model fetcher waits out (store.explain -> StoreOutage), the
progress line it writes while it waits, and its outage budget's setting. Pure: real botocore and
s3transfer exception objects, no store."""

from __future__ import annotations

import io
import json

import botocore.exceptions
import pytest

from ocr_server.fetch import FETCH_FAILED, FetchError
from ocr_server.fetch.report import Reporter
from ocr_server.fetch.settings import from_env
from ocr_server.fetch.store import StoreOutage, explain
from ocr_server.fetch.waiting import StoreWait

ENDPOINT = "http://s3.example:7070"


def answer(code: str, status: int) -> botocore.exceptions.ClientError:
    error = {"Code": code, "Message": "..."} if code else {}
    return botocore.exceptions.ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}},
                                           "GetObject")


@pytest.mark.parametrize("exc, why", [
    (answer("SlowDown", 503), f"SlowDown from {ENDPOINT}"),
    (answer("InternalError", 500), f"InternalError from {ENDPOINT}"),
    (answer("", 502), f"502 from {ENDPOINT}"),
    (answer("", 429), f"429 from {ENDPOINT}"),
    (botocore.exceptions.EndpointConnectionError(endpoint_url=ENDPOINT),
     f"no answer from {ENDPOINT} (EndpointConnectionError)"),
    (botocore.exceptions.ReadTimeoutError(endpoint_url=ENDPOINT), f"no answer from {ENDPOINT} (ReadTimeoutError)"),
    (botocore.exceptions.ResponseStreamingError(error=ConnectionResetError(104, "reset")),
     f"no answer from {ENDPOINT} (ResponseStreamingError)"),
])
def test_no_answer_a_5xx_or_throttling_is_an_outage_waited_out(exc, why):
    err = explain(exc, "s3://m/tiny/a.bin", ENDPOINT)
    assert isinstance(err, StoreOutage) and err.reason == FETCH_FAILED and err.why == why


@pytest.mark.parametrize("exc, words", [
    (answer("AccessDenied", 403), "refused the credentials"), (answer("", 403), "refused the credentials"),
    (answer("SignatureDoesNotMatch", 403), "refused the credentials"),
    (answer("NoSuchKey", 404), "no such object"), (answer("", 404), "no such object"),
    (answer("NoSuchBucket", 404), "bucket does not exist"), (answer("InvalidRange", 416), "InvalidRange"),
])
def test_a_403_or_404_is_a_failure_at_once_not_an_outage(exc, words):
    err = explain(exc, "s3://m/tiny/a.bin", ENDPOINT)
    assert not isinstance(err, StoreOutage) and err.reason == FETCH_FAILED and words in str(err)


def test_while_it_waits_the_fetcher_writes_a_progress_line_saying_why_and_the_budget_left():
    out = io.StringIO()
    wait = StoreWait(300, Reporter(out=out, termination_log=None), check=lambda: None, rng=lambda: 1.0)
    delay = wait.failed(StoreOutage("s3://m/tiny/a.bin: 503", f"503 from {ENDPOINT}"), attempt=2)
    line = json.loads(out.getvalue().splitlines()[-1])
    assert delay == 2.0 and line["event"] == "progress" and "percent" in line
    assert line["waiting"].startswith(f"waiting for S3: 503 from {ENDPOINT}; retry 1, 0s waited, ")
    assert line["waiting"].endswith("s of the 300s outage budget left")
    assert line["outage"]["reason"] == f"503 from {ENDPOINT}" and line["outage"]["budget_seconds"] == 300
    assert 299 < line["outage"]["budget_left_seconds"] <= 300


def test_past_the_budget_the_fetch_fails_naming_the_outage_and_how_long_it_waited():
    wait = StoreWait(0, Reporter(out=io.StringIO(), termination_log=None), check=lambda: None)
    with pytest.raises(FetchError, match=r"^S3 outage: the store did not answer for 0.0s, past the outage budget "
                                         r"of 0s \(spec.model.source.s3.maxOutageSeconds\); last: s3://m/a: 503$"):
        wait.failed(StoreOutage("s3://m/a: 503", "503"), attempt=0)


def test_the_outage_budget_is_300_seconds_by_default_and_0_waits_for_nothing():
    base = {"FETCH_URL": "s3://models/ocr/v1", "FETCH_CACHE_DIR": "/cache"}
    assert from_env(base).max_outage_seconds == 300
    assert from_env({**base, "FETCH_MAX_OUTAGE_SECONDS": "0"}).max_outage_seconds == 0
    with pytest.raises(FetchError, match="FETCH_MAX_OUTAGE_SECONDS: '-1' must be positive"):
        from_env({**base, "FETCH_MAX_OUTAGE_SECONDS": "-1"})
