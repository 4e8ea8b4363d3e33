"""Reads of S3 endpoints a tenant controls are bounded: a listing answered with more than the bound
is not read further, and the access key ID is in no message. The operator itself never connects to
a batch's storage (test_preflight_storage.py); the workers do, through these bounds. Every
endpoint here is a server on 127.0.0.1."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from ocr_batch_worker import s3 as s3mod

ACCESS_KEY = "AKIAEXAMPLEKEYID0001"


class S3Imitation:
    """An HTTP server on 127.0.0.1 that answers every GET with `size` bytes of a listing."""

    def __init__(self, size: int) -> None:
        self.gets = 0
        outer = self

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
        self.server.shutdown()
        self.server.server_close()


def test_a_listing_answer_over_the_bound_is_not_read_further(monkeypatch):
    monkeypatch.setattr(s3mod, "MAX_ANSWER_BYTES", 256 * 1024)
    server = S3Imitation(size=64 * 1024 * 1024)  # 64 MiB: read whole, before, by botocore
    try:
        store = s3mod.S3Store(server.endpoint, "docs", "in/", ACCESS_KEY, "secret-key-0000000000")
        started = time.monotonic()
        with pytest.raises(s3mod.S3Error) as raised:
            store.list(10)
        error = str(raised.value)
        assert "an answer of more than 262144 bytes" in error, error
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
