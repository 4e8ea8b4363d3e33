"""The operator's reads of endpoints a tenant controls are bounded: an S3 endpoint that answers a
listing with more than the bound is not read further, one that never answers holds neither the
batch's reconcile nor another namespace's preflight (runtime.bounded's pool, one call per tenant),
and the access key ID is in no message. Every endpoint here is a server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import http.server
import socket
import threading
import time

import pytest

from ocr_batch_worker import s3 as s3mod
from ocr_operator.ocrbatch import egress, preflight
from ocr_operator.runtime.bounded import TENANT_CALLS

ACCESS_KEY = "AKIAEXAMPLEKEYID0001"


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    """The imitations are on loopback, which the operator lists only when its allowlist says so."""
    monkeypatch.setenv(egress.ALLOW_ENV, "127.0.0.1/32")


class S3Imitation:
    """An HTTP server on 127.0.0.1 that answers every GET with `size` bytes of a listing (or, with
    size None, accepts connections and never answers)."""

    def __init__(self, size: int | None) -> None:
        self.gets = 0
        outer = self
        if size is None:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.sock.listen(16)
            self.port = self.sock.getsockname()[1]
            self.server = None
            return

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                outer.gets += 1
                head = b'<?xml version="1.0"?><ListBucketResult><Name>docs</Name><Prefix>in/</Prefix>'
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                tail = b"<KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>"
                try:
                    self.wfile.write(head)
                    left = size - len(head) - len(tail)
                    while left > 0:
                        n = min(left, 65536)
                        self.wfile.write(b" " * n)
                        left -= n
                    self.wfile.write(tail)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        else:
            self.sock.close()


def secret(endpoint: str) -> dict[str, str]:
    data = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": "secret-key-0000000000",
            "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": "us-east-1"}
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}


def test_a_listing_answer_over_the_bound_is_not_read_further(monkeypatch):
    monkeypatch.setattr(s3mod, "MAX_ANSWER_BYTES", 256 * 1024)
    server = S3Imitation(size=64 * 1024 * 1024)  # 64 MiB: read whole, before, by botocore
    try:
        started = time.monotonic()
        error = asyncio.run(preflight.s3_input_error({"url": "s3://docs/in/", "credentialsSecret": "s"},
                                                     secret(server.endpoint), tenant="big-answer"))
        assert error is not None and "an answer of more than 262144 bytes" in error, error
        assert time.monotonic() - started < 10
        assert ACCESS_KEY not in error
    finally:
        server.close()


def test_a_store_reads_a_listing_under_the_bound_as_before(monkeypatch):
    monkeypatch.setattr(s3mod, "MAX_ANSWER_BYTES", 256 * 1024)
    server = S3Imitation(size=1024)
    try:
        store = s3mod.S3Store(server.endpoint, "docs", "in/", ACCESS_KEY, "secret-key-0000000000")
        with pytest.raises(s3mod.PrefixNotFound):  # an empty listing, parsed: no object under the prefix
            store.list(10)
    finally:
        server.close()


def test_a_silent_s3_endpoint_holds_neither_the_reconcile_nor_another_namespace(monkeypatch):
    monkeypatch.setattr(preflight, "S3_CHECK_SECONDS", 0.5)
    silent, answering = S3Imitation(size=None), S3Imitation(size=1024)
    try:
        async def go():
            started = time.monotonic()
            first = await preflight.s3_input_error({"url": "s3://docs/in/", "credentialsSecret": "s"},
                                                   secret(silent.endpoint), tenant="team-slow")
            waited = time.monotonic() - started
            # The slow namespace's listing still holds its thread (its own read timeout ends it):
            again = await preflight.s3_input_error({"url": "s3://docs/in/", "credentialsSecret": "s"},
                                                   secret(silent.endpoint), tenant="team-slow")
            other = await preflight.s3_input_error({"url": "s3://docs/in/", "credentialsSecret": "s"},
                                                   secret(answering.endpoint), tenant="team-other")
            # The loop's default executor is not where the listing waits: it is free at once.
            t0 = time.monotonic()
            await asyncio.get_running_loop().run_in_executor(None, lambda: None)
            return first, waited, again, other, time.monotonic() - t0

        first, waited, again, other, default_wait = asyncio.run(go())
        assert first == "s3://docs/in/ did not answer within 0 s", first  # S3_CHECK_SECONDS 0.5, as "%.0f"
        assert waited < 2.0
        assert again is not None and "has not ended yet" in again
        assert other is not None and other.startswith("no object under s3://docs/in/")
        assert default_wait < 0.5
        assert TENANT_CALLS.in_flight() >= 1
    finally:
        silent.close()
        answering.close()


def test_a_missing_credential_is_told_without_saying_which_key_the_secret_lacks():
    from ocr_batch_worker.config import ConfigError, Location
    from ocr_batch_worker.storage import open_store

    said = set()
    for env in ({"INPUT_AWS_ACCESS_KEY_ID": ACCESS_KEY}, {"INPUT_AWS_SECRET_ACCESS_KEY": "s"}, {}):
        with pytest.raises(ConfigError) as err:
            open_store(Location("s3", "s3://docs/in/"), "input", env)
        said.add(str(err.value))
        assert ACCESS_KEY not in str(err.value)
    assert said == {"input.s3.credentialsSecret: INPUT_AWS_ACCESS_KEY_ID and INPUT_AWS_SECRET_ACCESS_KEY must both "
                    "be set"}
