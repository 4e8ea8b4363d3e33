"""The model fetcher as the init container runs it, and its waits: a stalled store, another pod
fetching the same key, the program's output and termination message. Real versitygw throughout."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from localcluster.s3server import S3Server
from ocr_server.fetch import CHECKSUM_MISMATCH, FETCH_FAILED, FetchError
from ocr_server.fetch.cache import Cache, key_of
from ocr_server.fetch.fetcher import Fetch
from ocr_server.fetch.report import Reporter

from .fetch_support import WEIGHTS, checksums, gets, lines, reporter, settings, upload


@pytest.fixture(scope="module")
def s3():
    with S3Server(access_log=True) as server:
        yield server


class _StopsTheStore(Reporter):
    """Stops versitygw (SIGSTOP: it keeps its connections and sends nothing) at the first bytes."""

    def __init__(self, s3, **kw) -> None:
        super().__init__(**kw)
        self.s3 = s3

    def add_bytes(self, n: int) -> None:
        if self.bytes == 0:
            os.kill(self.s3.pid, signal.SIGSTOP)
        super().add_bytes(n)


def test_with_no_outage_budget_a_store_that_stops_sending_fails_the_fetch_as_stalled_within_the_stall_bound(
        s3, tmp_path):
    bucket = upload(s3)
    rep = _StopsTheStore(s3, out=open(os.devnull, "w"), every=0, termination_log=None)
    t0 = time.monotonic()
    try:
        with pytest.raises(FetchError, match=r"stalled: no byte for 2s \(FETCH_STALL_SECONDS\)") as err:
            Fetch(settings(s3, bucket, tmp_path, given=checksums(), stall_seconds=2, concurrency=1,
                           max_outage_seconds=0), rep).run()
    finally:
        os.kill(s3.pid, signal.SIGCONT)
    assert err.value.reason == FETCH_FAILED and time.monotonic() - t0 < 10


def test_a_store_that_hangs_for_a_while_is_waited_out_as_an_outage_and_the_fetch_completes(s3, tmp_path):
    """versitygw stopped (SIGSTOP: connections open, nothing sent) at the first bytes for 3 s, a
    stall bound of 1 s: the stall starts an outage, which ends when the bytes come again."""
    bucket = upload(s3)
    out = io.StringIO()
    rep = _StopsTheStore(s3, out=out, every=0, termination_log=None)
    threading.Timer(3.0, os.kill, (s3.pid, signal.SIGCONT)).start()
    t0 = time.monotonic()
    try:
        path = Fetch(settings(s3, bucket, tmp_path, given=checksums(), stall_seconds=1, concurrency=1,
                              max_outage_seconds=30), rep).run()
    finally:
        os.kill(s3.pid, signal.SIGCONT)
    waiting = [line["waiting"] for line in lines(out) if "waiting" in line]
    assert waiting and waiting[0].startswith(f"waiting for S3: no byte from {s3.endpoint} for 1s; retry 1")
    assert all((path / name).read_bytes() == data for name, data in WEIGHTS.items())
    assert 2.5 < time.monotonic() - t0 < 15


def test_a_second_fetcher_of_the_same_key_waits_for_the_first_and_then_hits_the_cache(s3, tmp_path):
    bucket = upload(s3)
    cache_dir = tmp_path / "cache"
    results, outs = {}, {}

    def run(pod: str) -> None:
        rep, outs[pod] = reporter(tmp_path / pod)
        (tmp_path / pod).mkdir()
        results[pod] = Fetch(settings(s3, bucket, tmp_path / pod, given=checksums(), cache=cache_dir), rep).run()

    with Cache(cache_dir).lock(key_of(checksums()), time.monotonic() + 5):  # as if a third pod fetched
        threads = [threading.Thread(target=run, args=(pod,)) for pod in ("a", "b")]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while not all(pod in outs and '"waiting"' in outs[pod].getvalue() for pod in ("a", "b")):
            assert time.monotonic() < deadline, "the fetchers did not wait for the lock"
            time.sleep(0.05)
        before = len(gets(s3))
    for t in threads:
        t.join(30)
    assert results["a"] == results["b"] == cache_dir / key_of(checksums())
    assert sorted(lines(outs[p])[-1]["cache"] for p in ("a", "b")) == ["hit", "miss"]
    assert len(gets(s3)) - before == 2 + 6  # one copy: two small files, the model in 6 ranges


def test_the_program_prints_progress_lines_and_leaves_the_reason_naming_the_file_in_its_termination_message(
        s3, tmp_path):
    bucket = upload(s3, {**WEIGHTS, "sub/tokenizer.json": b"tampered"})
    spec = tmp_path / "model-checksums.json"
    spec.write_text(json.dumps(checksums()))
    env = {"PATH": os.environ["PATH"], "FETCH_URL": f"s3://{bucket}/models/tiny", "FETCH_CACHE_DIR": str(tmp_path / "c"),
           "FETCH_LINK": str(tmp_path / "m" / "tiny"), "FETCH_CHECKSUMS_FILE": str(spec),
           "FETCH_TERMINATION_LOG": str(tmp_path / "termination-log"), "FETCH_PROGRESS_SECONDS": "0.01",
           "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key,
           "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.region}
    proc = subprocess.run([sys.executable, "-m", "ocr_server.fetch"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    assert out[0]["event"] == "progress" and {"percent", "bytes", "total_bytes", "files", "total_files"} <= set(out[0])
    assert out[-1]["event"] == "failed" and out[-1]["reason"] == CHECKSUM_MISMATCH
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("ChecksumMismatch: sub/tokenizer.json from s3://") and "expects" in message
