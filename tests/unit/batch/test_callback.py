"""The completion webhook (ocr_operator.ocrbatch.callback): signature, retries, one delivery."""

import asyncio
import datetime as dt
import json

from ocr_operator.ocrbatch import callback

BATCH = {"metadata": {"namespace": "ocr", "name": "archive", "uid": "u-1"},
         "spec": {"service": "invoices", "output": {"pvc": {"claimName": "results", "path": "/"}}},
         "status": {"phase": "Succeeded", "pages": {"total": 3, "done": 3, "failed": 0},
                    "conditions": [{"type": "Complete", "status": "True", "message": "3 pages done"}]}}
NOW = dt.datetime(2026, 12, 2, 15, 0, tzinfo=dt.timezone.utc)


def test_the_payload_names_the_batch_the_event_and_its_counts():
    doc = callback.payload(BATCH, "batch.completed", NOW)
    assert doc["id"] == "u-1:batch.completed" and doc["type"] == "batch.completed"
    assert doc["batch"] == {"namespace": "ocr", "name": "archive", "uid": "u-1", "service": "invoices"}
    assert (doc["phase"], doc["pages"]["done"], doc["message"]) == ("Succeeded", 3, "3 pages done")


def test_a_signature_verifies_only_for_its_key_and_body():
    body = b'{"a":1}'
    header = callback.sign(b"k", 1700000000, body)
    assert header.startswith("t=1700000000,v1=")
    now = 1700000000
    assert callback.verify(b"k", header, body, now=now)
    assert not callback.verify(b"other", header, body, now=now)
    assert not callback.verify(b"k", header, b'{"a":2}', now=now)
    assert not callback.verify(b"k", header.replace("t=1700000000", "t=1700000001"), body, now=now)


class Receiver:
    def __init__(self, answers):
        self.answers = list(answers)
        self.requests = []

    async def post(self, url, body, headers):
        self.requests.append((url, body, headers))
        status = self.answers.pop(0)
        return (status, "3" if status == 429 else None, "refused" if status is None else "")


def run(receiver, key=b"secret", attempts=callback.MAX_ATTEMPTS):
    slept = []

    async def sleep(s):
        slept.append(s)

    doc = callback.payload(BATCH, "batch.completed", NOW)
    out = asyncio.run(callback.deliver("https://h/x", doc, key, post=receiver.post, sleep=sleep,
                                       clock=lambda: 1700000000, max_attempts=attempts))
    return out, slept


def test_408_429_5xx_and_no_answer_are_retried_with_backoff_then_delivered_once():
    r = Receiver([500, None, 429, 408, 200])
    out, slept = run(r)
    assert (out.state, out.attempts, out.status) == ("Delivered", 5, 200)
    assert slept == [1.0, 2.0, 3.0, 8.0]  # 429's Retry-After: 3
    bodies = {body for _, body, _ in r.requests}
    assert len(bodies) == 1  # the same body every time
    headers = r.requests[-1][2]
    assert headers["Idempotency-Key"] == "u-1:batch.completed"
    assert callback.verify(b"secret", headers[callback.SIGNATURE_HEADER], r.requests[-1][1], now=1700000000)
    assert json.loads(r.requests[-1][1])["type"] == "batch.completed"


def test_another_client_error_is_not_retried():
    out, slept = run(Receiver([404]))
    assert (out.state, out.attempts, out.status, slept) == ("GaveUp", 1, 404, [])


def test_retries_are_bounded():
    out, slept = run(Receiver([503] * 3), attempts=3)
    assert (out.state, out.attempts, len(slept)) == ("GaveUp", 3, 2)


def test_without_a_key_the_request_is_not_signed():
    r = Receiver([204])
    run(r, key=None)
    assert callback.SIGNATURE_HEADER not in r.requests[0][2]


def test_a_delivered_callback_is_recorded_with_its_last_status_and_a_normal_event():
    batch = {**BATCH, "spec": {**BATCH["spec"], "callback": {"url": "https://hooks.example/ocr"}}}
    record, event = callback.recorded(batch, "batch.completed", callback.Outcome("Delivered", 2, 204), "2026-12-02T15:00:00Z")
    assert record == {"event": "batch.completed", "id": "u-1:batch.completed", "state": "Delivered", "attempts": 2,
                      "time": "2026-12-02T15:00:00Z", "lastStatus": 204}
    assert event == ("Normal", "CallbackDelivered",
                     "batch.completed to https://hooks.example/ocr: delivered after 2 attempt(s)")


def test_a_callback_given_up_without_an_answer_is_recorded_with_its_error_and_a_warning():
    batch = {**BATCH, "spec": {**BATCH["spec"], "callback": {"url": "https://hooks.example/ocr"}}}
    outcome = callback.Outcome("GaveUp", 5, None, "connection refused")
    record, event = callback.recorded(batch, "batch.failed", outcome, "2026-12-02T15:00:00Z")
    assert "lastStatus" not in record and record["error"] == "connection refused" and record["attempts"] == 5
    assert event[:2] == ("Warning", "CallbackGaveUp") and event[2].endswith(": gave up after 5 attempt(s) (connection refused)")
