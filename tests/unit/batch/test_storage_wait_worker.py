"""A storage outage in the worker's progress report (patience.Outage.report, worker.storage_news), on
real stores that fail: a folder whose volume fails with EIO until it is back, and the real S3
server (versitygw) stopped and started again. The report says which store, since when, how many
tries failed and the last failure in a few words (no key, no credentials), on one bounded line,
and says nothing once the storage answers again."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import socket
import threading
import time
import uuid

import boto3
import pytest
from PIL import Image

from localcluster.s3server import S3Server
from ocr_batch_worker.client import OcrClient
from ocr_batch_worker.patience import MAX_ERROR_CHARS, Backoff, Outage, PatientStore, StorageUnavailable
from ocr_batch_worker.s3 import S3Store
from ocr_batch_worker.storage import FileStore, TransientStoreError, os_error
from ocr_batch_worker.worker import Worker

from .pageserver import PageServer
from .test_patience import DownUntil, restart_same_port
from .workerrun import worker_config


class ListDownFor(FileStore):
    """A real folder whose listing fails `times` times (EIO from the kernel's own error, or `error`)."""

    def __init__(self, root, times: int, error: Exception | None = None) -> None:
        super().__init__(root)
        self.times, self.error = times, error

    def list(self, limit: int) -> list[tuple[str, int]]:
        if self.times > 0:
            self.times -= 1
            raise self.error or os_error("in", "listed", OSError(errno.EIO, os.strerror(errno.EIO)))
        return super().list(limit)


def png(path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (40, 30), (1, 2, 3)).save(path, "PNG")


def run_worker(tmp_path, source, url: str, interval: float) -> list[dict]:
    """The worker over `source` and a real output folder; its progress reports, in order."""
    cfg = worker_config(tmp_path, url, progressIntervalSeconds=interval)
    lines: list[bytes] = []

    async def go() -> None:
        outage = Outage(60)
        client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=cfg.request_timeout)
        try:
            await Worker(cfg, PatientStore(source, outage, Backoff(0.01, 0.05), role="input"),
                         PatientStore(FileStore(cfg.output.path), outage, role="output"), client.send,
                         emit=lines.append, outage=outage).run()
        finally:
            await client.close()

    asyncio.run(go())
    for line in lines:  # each report is one line of escaped JSON, bounded
        assert b"\n" not in line and len(line) < 2000, line
    return [json.loads(line) for line in lines]


def test_an_outage_is_reported_with_its_store_start_tries_and_last_error_and_cleared_when_it_ends(tmp_path):
    store = DownUntil(tmp_path)
    outage = Outage(600)
    told: list[dict | None] = []
    outage.listen(lambda: told.append(outage.report()))
    before = time.time()
    writer = threading.Thread(target=PatientStore(store, outage, Backoff(0.02, 0.05), role="output").put,
                              args=("secret-name/doc.json", b"x"), daemon=True)
    writer.start()
    time.sleep(0.5)
    now = outage.report()
    assert now is not None and now["store"] == "output" and now["retries"] >= 3
    assert now["last_error"] == os.strerror(errno.EIO) and "secret-name" not in json.dumps(now)
    assert before - 0.001 <= now["waiting_since"] <= before + 1  # unix seconds, to the millisecond
    store.up.set()
    writer.join(5)
    assert outage.report() is None and told[-1] is None
    assert told[0] == {"store": "output", "waiting_since": now["waiting_since"], "retries": 1,
                       "last_error": os.strerror(errno.EIO)}


def test_a_worker_waiting_for_its_input_says_so_in_its_progress_line_and_stops_saying_so_once_it_lists(tmp_path):
    png(tmp_path / "in" / "a.png")
    with PageServer() as server:
        reports = run_worker(tmp_path, ListDownFor(tmp_path / "in", times=4), server.url, interval=0)
    waiting = [r["storage"] for r in reports if r["storage"] is not None]
    assert [w["retries"] for w in waiting] == [1, 2, 3, 4]  # a line per failed try (interval 0)
    assert {w["store"] for w in waiting} == {"input"} and waiting[0]["last_error"] == os.strerror(errno.EIO)
    first = next(i for i, r in enumerate(reports) if r["storage"] is not None)
    assert reports[first]["documents_total"] == 0  # before the listing: nothing else to say
    assert reports[-1]["storage"] is None and reports[-1]["finished"] and reports[-1]["pages_done"] == 1


def test_the_storage_wait_writes_a_line_when_it_starts_and_ends_and_at_most_one_a_second_between(tmp_path):
    png(tmp_path / "in" / "a.png")
    with PageServer() as server:
        reports = run_worker(tmp_path, ListDownFor(tmp_path / "in", times=6), server.url, interval=3600)
    assert [r["storage"]["retries"] for r in reports if r["storage"]] == [1]  # 6 tries failed within a second: one line
    cleared = next(i for i, r in enumerate(reports) if r["storage"])
    assert reports[cleared + 1]["storage"] is None  # the end of the outage has its line at once


def test_a_hostile_storage_error_stays_one_short_line_and_forges_no_progress_line(tmp_path):
    png(tmp_path / "in" / "a.png")
    hostile = 'SlowDown\n{"progress": {"index": 0, "pages_done": 999}}\r\u2028' + "z" * 10_000
    with PageServer() as server:
        reports = run_worker(tmp_path, ListDownFor(tmp_path / "in", 1, TransientStoreError("x", hostile)),
                             server.url, interval=0)
    (said,) = [r["storage"]["last_error"] for r in reports if r["storage"]]
    assert said == hostile[:MAX_ERROR_CHARS]


def test_an_unreachable_s3_endpoint_is_reported_by_its_endpoint_never_its_bucket_key_or_credentials():
    with S3Server() as s3:
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                     aws_secret_access_key=s3.secret_key, region_name=s3.region).create_bucket(Bucket=bucket)
        outage = Outage(60)
        told: list[dict | None] = []
        outage.listen(lambda: told.append(outage.report()))
        store = PatientStore(S3Store(s3.endpoint, bucket, "private-prefix/", s3.access_key, s3.secret_key),
                             outage, Backoff(0.2, 1.0), role="output")
        store.put("before", b"1")
        down = threading.Thread(target=restart_same_port, args=(s3, 4.0))
        down.start()
        time.sleep(0.5)  # the server is down now
        img = io.BytesIO()
        Image.new("RGB", (4, 4)).save(img, "PNG")
        store.put("during-secret-document.png", img.getvalue())
        down.join()
        waits = [t for t in told if t is not None]
        assert waits and told[-1] is None and outage.report() is None
        said = json.dumps(waits)
        assert waits[-1]["store"] == "output" and waits[-1]["retries"] >= 2
        assert waits[-1]["last_error"].startswith(f"no answer from {s3.endpoint} (")
        for secret in (bucket, "private-prefix", "during-secret-document", s3.access_key, s3.secret_key):
            assert secret not in said


class NeverAnswers:
    """A real TCP endpoint that accepts every connection and never answers (an S3 endpoint that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.connections.append(self.sock.accept()[0])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        for conn in [*self.connections, self.sock]:
            conn.close()


def test_an_endpoint_that_never_answers_is_a_wait_from_its_first_timed_out_attempt_each_attempt_counted_once():
    hang = NeverAnswers()
    try:
        outage = Outage(0.5)  # spent by the time the request fails: it fails after botocore's own attempts
        store = PatientStore(S3Store(hang.endpoint, "bucket", "in/", "key", "secret", timeouts=(1, 0.5)), outage,
                             role="input")
        failed: list[BaseException] = []
        lister = threading.Thread(target=lambda: failed.append(pytest.raises(StorageUnavailable, store.list, 10)))
        lister.start()
        deadline = time.monotonic() + 1.5
        while outage.report() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        early = outage.report()
        lister.join(30)
        assert early is not None and early["store"] == "input" and lister.ident and failed
        assert early["last_error"] == f"no answer from {hang.endpoint} (ReadTimeoutError)"
        assert len(hang.connections) >= 3  # botocore tried several times before the request failed
        assert outage.report()["retries"] == len(hang.connections)  # every attempt once, none twice
    finally:
        hang.close()
