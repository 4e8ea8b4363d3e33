"""What the worker does with each answer of the OcrService (ocr_batch_worker.retry)."""

import pytest

from ocr_batch_worker.retry import Done, Fatal, GiveUp, Retry, RetryPolicy, backoff, decide

POLICY = RetryPolicy(max_retries=3, base_seconds=1, cap_seconds=8, max_retry_after=60, max_shed_wait=100)


def test_a_200_is_done():
    assert decide(200, "", None, 0, 0, 0.5, POLICY) == Done()


def test_a_429_waits_its_retry_after_and_does_not_use_up_the_retries():
    assert decide(429, "shed", "7", retries=3, shed_waited=0, jitter=0.5, policy=POLICY) == Retry(7.0, shed=True)


def test_a_429_without_retry_after_waits_the_first_backoff():
    assert decide(429, "shed", None, 0, 0, 1.0, POLICY) == Retry(1.0, shed=True)


def test_the_wait_on_429s_for_one_page_is_bounded():
    step = decide(429, "shed", "10", 0, shed_waited=95, jitter=0.5, policy=POLICY)
    assert isinstance(step, GiveUp) and "429" in step.reason


@pytest.mark.parametrize("status", [None, 408, 500, 502, 503, 504])
def test_a_transient_failure_is_retried_with_backoff(status):
    assert decide(status, "boom", None, 2, 0, 1.0, POLICY) == Retry(4.0, shed=False)


@pytest.mark.parametrize("status", [None, 503])
def test_a_transient_failure_gives_up_after_the_retries_naming_the_attempts(status):
    step = decide(status, "connection refused", None, 3, 0, 1.0, POLICY)
    assert isinstance(step, GiveUp) and "after 4 attempts: connection refused" in step.reason


def test_a_503_retry_after_is_honoured():
    assert decide(503, "loading", "3", 0, 0, 1.0, POLICY) == Retry(3.0, shed=False)


def test_a_huge_retry_after_is_bounded_and_a_date_is_ignored():
    assert decide(429, "", "999999", 0, 0, 1.0, POLICY) == Retry(60.0, shed=True)
    assert decide(429, "", "Wed, 21 Oct 2015 07:28:00 GMT", 0, 0, 1.0, POLICY) == Retry(1.0, shed=True)


@pytest.mark.parametrize("status", [400, 413, 415, 422, 404])
def test_a_refused_page_fails_at_once_with_the_servers_reason(status):
    assert decide(status, "the image is truncated", None, 0, 0, 0.5, POLICY) == GiveUp(f"{status}: the image is truncated")


@pytest.mark.parametrize("status", [401, 403])
def test_a_rejected_api_key_stops_the_worker(status):
    assert isinstance(decide(status, "a valid API key is required", None, 0, 0, 0.5, POLICY), Fatal)


def test_the_backoff_doubles_up_to_its_cap_and_jitter_takes_off_at_most_half():
    assert [backoff(a, 1.0, POLICY) for a in range(5)] == [1, 2, 4, 8, 8]
    assert backoff(2, 0.0, POLICY) == 2.0
