"""The completion callback through its egress guard, against a real receiver on loopback: a
loopback URL is refused (nothing sent, a clear Callback condition on the OcrBatch), the same
receiver allowlisted gets the signed callback, a name is connected to at the address checked
(no second lookup), no proxy of the environment is used, and the HMAC key and the signature's
timestamp are checked."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import functools
import http.server
import threading

import pytest

from ocr_operator.ocrbatch import callback, decide, egress
from ocr_operator.runtime.controller import Context
from ocr_operator.runtime.jobs import Jobs

from tests.unit.batch.test_controller import NOW, NS, batch, world

KEY = b"k" * 32
BATCH = {"metadata": {"namespace": "ocr", "name": "archive", "uid": "u-1"},
         "spec": {"service": "invoices", "output": {}}, "status": {"phase": "Succeeded"}}


class Receiver:
    """An HTTP server on 127.0.0.1 that answers 204 and keeps what it was sent."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def send(url: str, policy: egress.Policy, lookup=egress.system_lookup, key: bytes | None = KEY) -> callback.Outcome:
    doc = callback.payload(BATCH, "batch.completed", NOW)

    async def no_sleep(_):
        return None

    post = functools.partial(callback.http_post, policy=policy, lookup=lookup)
    return asyncio.run(callback.deliver(url, doc, key, post=post, sleep=no_sleep, max_attempts=2))


def test_a_loopback_callback_is_refused_and_nothing_is_sent(receiver):
    for url in (f"http://127.0.0.1:{receiver.port}/hook", f"http://localhost:{receiver.port}/hook",
                f"http://[::ffff:127.0.0.1]:{receiver.port}/hook"):
        out = send(url, egress.Policy())
        assert (out.state, out.refused, out.attempts) == ("GaveUp", True, 1), out
        assert "loopback address" in out.error and "callbacks.allowCidrs" in out.error
    assert receiver.requests == []


def test_an_allowlisted_receiver_gets_the_signed_callback(receiver):
    out = send(f"http://127.0.0.1:{receiver.port}/hook", egress.Policy(allow=egress.parse_cidrs("127.0.0.1/32")))
    assert (out.state, out.status, out.refused) == ("Delivered", 204, False)
    [(headers, body)] = receiver.requests
    assert callback.verify(KEY, headers[callback.SIGNATURE_HEADER], body)


def test_a_name_is_connected_to_at_the_address_checked_with_one_lookup(receiver):
    calls: list[str] = []

    async def lookup(host: str, port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]  # callback.test exists nowhere but here: aiohttp cannot look it up itself

    out = send(f"http://callback.test:{receiver.port}/hook", egress.Policy(allow=egress.parse_cidrs("127.0.0.1")),
               lookup)
    assert out.state == "Delivered" and calls == ["callback.test"]
    assert receiver.requests[0][0]["Host"] == f"callback.test:{receiver.port}"  # the URL's name, not the address


def test_a_proxy_in_the_environment_is_not_used(receiver, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    out = send(f"http://127.0.0.1:{receiver.port}/hook", egress.Policy(allow=egress.parse_cidrs("127.0.0.1")))
    assert out.state == "Delivered" and len(receiver.requests) == 1


def test_a_name_that_does_not_resolve_is_retried_not_refused():
    async def lookup(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known")

    out = send("https://hooks.invalid/x", egress.Policy(), lookup)
    assert (out.state, out.refused, out.attempts) == ("GaveUp", False, 2) and "resolving the host" in out.error


def test_the_signature_is_refused_outside_the_tolerance():
    body = b'{"a":1}'
    header = callback.sign(KEY, 1_700_000_000, body)
    assert callback.verify(KEY, header, body, now=1_700_000_000 + 299)
    assert callback.verify(KEY, header, body, now=1_700_000_000 - 299)  # a receiver's clock a little behind
    assert not callback.verify(KEY, header, body, now=1_700_000_000 + 301)  # a replay, later
    assert not callback.verify(KEY, header, body, now=1_700_000_000 + 60, tolerance=30)
    assert not callback.verify(KEY, header.replace("t=1700000000", "t=1700000100"), body, now=1_700_000_100)


def test_an_hmac_key_under_32_bytes_holds_the_batch_with_a_clear_condition():
    spec = {"service": "invoices", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
            "output": {"pvc": {"claimName": "results", "path": "/"}},
            "callback": {"url": "https://hooks.example/ocr", "secretRef": {"name": "hook", "key": "hmac"}}}
    found = decide.Found({"spec": {}}, {"spec": {"clusterIP": "10.96.0.7"}}, {"docs": True, "results": True},
                         {"hook": {"hmac": base64.b64encode(b"short").decode()}})
    missing = decide.preflight(spec, found)
    assert missing.reason == "CallbackKeyTooShort" and "at least 32 bytes" in missing.message
    ok = decide.Found(found.service, found.service_endpoint, found.claims, {"hook": {"hmac": base64.b64encode(KEY).decode()}})
    assert decide.preflight(spec, ok) is None


def test_a_missing_secret_and_a_missing_key_read_the_same_and_name_only_the_keys_needed():
    spec = {"service": "invoices", "input": {"s3": {"url": "s3://docs/in/", "credentialsSecret": "s3"}},
            "output": {"pvc": {"claimName": "results", "path": "/"}}}
    base = ({"spec": {}}, {"spec": {"clusterIP": "10.96.0.7"}}, {"results": True})
    absent = decide.preflight(spec, decide.Found(*base, {}))
    lacking = decide.preflight(spec, decide.Found(*base, {"s3": {"AWS_ACCESS_KEY_ID": "a", "OTHER": "b"}}))
    other = decide.preflight(spec, decide.Found(*base, {"s3": {"AWS_SECRET_ACCESS_KEY": "b"}}))
    assert absent == lacking == other
    assert "OTHER" not in absent.message and "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY" in absent.message


def ended_batch(url: str) -> dict:
    return batch(status={"phase": "Succeeded", "jobName": "archive"},
                 callback={"url": url, "secretRef": {"name": "hook", "key": "hmac"}})


def hook_secret(key: bytes) -> dict:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hook", "namespace": NS},
            "data": {"hmac": base64.b64encode(key).decode()}}


def run_callback(kube, batches, body: dict) -> dict:
    async def go():
        jobs = Jobs(lambda key: None)
        await batches.reconcile(body, Context(now=NOW, jobs=jobs))
        for _ in range(200):  # the delivery job runs beside the reconciles
            await asyncio.sleep(0.02)
            if jobs.result(("team-a", "archive")) is not None:
                break
        await batches.reconcile(body, Context(now=NOW, jobs=jobs))
    asyncio.run(go())
    return kube.status


def condition(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_the_operator_refuses_a_loopback_callback_with_a_callback_condition(receiver, monkeypatch):
    monkeypatch.delenv(egress.ALLOW_ENV, raising=False)
    kube, batches = world(hook_secret(KEY))
    status = run_callback(kube, batches, ended_batch(f"http://127.0.0.1:{receiver.port}/hook"))
    assert status["callback"]["state"] == "GaveUp" and "loopback" in status["callback"]["error"]
    cond = condition(status, "Callback")
    assert (cond["status"], cond["reason"]) == ("False", "CallbackRefused") and "loopback" in cond["message"]
    assert receiver.requests == []


def test_the_operator_delivers_to_an_allowlisted_receiver(receiver, monkeypatch):
    monkeypatch.setenv(egress.ALLOW_ENV, "127.0.0.1/32")
    kube, batches = world(hook_secret(KEY))
    status = run_callback(kube, batches, ended_batch(f"http://127.0.0.1:{receiver.port}/hook"))
    assert status["callback"]["state"] == "Delivered"
    assert (condition(status, "Callback")["status"], condition(status, "Callback")["reason"]) == ("True", "Delivered")
    [(headers, body)] = receiver.requests
    assert callback.verify(KEY, headers[callback.SIGNATURE_HEADER], body)


def test_the_operator_does_not_sign_with_a_short_key_it_finds_at_the_end(receiver, monkeypatch):
    monkeypatch.setenv(egress.ALLOW_ENV, "127.0.0.1/32")
    kube, batches = world(hook_secret(b"short"))
    status = run_callback(kube, batches, ended_batch(f"http://127.0.0.1:{receiver.port}/hook"))
    assert status["callback"]["state"] == "GaveUp" and "at least 32 bytes" in status["callback"]["error"]
    assert receiver.requests == []


def test_the_timestamp_is_inside_the_signed_string():
    body = callback.body_bytes(callback.payload(BATCH, "batch.completed", dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)))
    header = callback.sign(KEY, 1_700_000_000, body)
    forged = header.replace("t=1700000000", "t=1700000200")  # a replay made to look fresh
    assert not callback.verify(KEY, forged, body, now=1_700_000_200)
