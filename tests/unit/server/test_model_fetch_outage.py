"""An S3 outage during a model fetch (ocr_server.fetch.waiting), end to end on this machine: the
fetcher as the init container runs it (`python -m ocr_server.fetch`, a real process) against the
real S3 server (versitygw), stopped while the fetch runs and started again on the same port with
the same data; one outage outlasts a small budget; refused credentials (403) and a missing bucket
(404) are not waited for."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from localcluster.s3server import S3Server

from ..batch.test_patience import restart_same_port
from .fetch_support import checksums, upload

ROOT = Path(__file__).resolve().parents[3]
# Six files of 4 MiB (1 MiB parts, one at a time): long enough that the fetch is stopped mid-way.
FILES = {f"model-{i}.safetensors": bytes([i]) * (4 << 20) for i in range(6)}


def fetcher(s3, bucket: str, tmp: Path, budget: float, secret: str | None = None) -> subprocess.Popen:
    spec = tmp / "model-checksums.json"
    spec.write_text(json.dumps(checksums(FILES)))
    env = {"PATH": os.environ["PATH"], "FETCH_URL": f"s3://{bucket}/models/tiny", "FETCH_CACHE_DIR": str(tmp / "c"),
           "FETCH_LINK": str(tmp / "m" / "tiny"), "FETCH_CHECKSUMS_FILE": str(spec),
           "FETCH_TERMINATION_LOG": str(tmp / "termination-log"), "FETCH_PROGRESS_SECONDS": "0.001",
           "FETCH_CONCURRENCY": "1", "FETCH_CHUNK_BYTES": str(1 << 20), "FETCH_MAX_OUTAGE_SECONDS": str(budget),
           "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": secret or s3.secret_key,
           "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.region, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "ocr_server.fetch"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_mid_fetch(proc: subprocess.Popen, s3: S3Server, down_seconds: float | None) -> list[dict]:
    """At the fetcher's first bytes, stop the S3 server (the fetcher paused meanwhile, so that it is
    mid-fetch); start it again on the same port after `down_seconds` (None: never). The lines read so far."""
    seen = []
    for line in proc.stdout:
        seen.append(json.loads(line))
        if seen[-1].get("bytes"):
            break
    os.kill(proc.pid, signal.SIGSTOP)
    s3.proc.send_signal(signal.SIGTERM)  # it refuses new connections at once, ends those open
    os.kill(proc.pid, signal.SIGCONT)  # (its in-flight answer read by the fetcher) and exits
    s3.proc.wait(timeout=10)
    if down_seconds is not None:
        threading.Thread(target=restart_same_port, args=(s3, down_seconds), daemon=True).start()
    return seen


def test_an_s3_outage_mid_fetch_is_waited_out_and_every_file_is_verified(tmp_path):
    with S3Server() as s3:
        bucket = upload(s3, FILES)
        start = time.monotonic()
        proc = fetcher(s3, bucket, tmp_path, budget=120)
        lines = stop_mid_fetch(proc, s3, down_seconds=4.0)
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - start
        lines += [json.loads(line) for line in out.splitlines()]
        assert proc.returncode == 0, err[-3000:]
        assert lines[0]["files"] == 0 and lines[-1]["event"] == "done" and lines[-1]["files"] == len(FILES)
        counted = [line["bytes"] for line in lines if "bytes" in line]
        assert counted == sorted(counted) and counted[-1] == sum(map(len, FILES.values()))  # no byte fetched again
        waiting = [line for line in lines if "waiting" in line]
        assert waiting and waiting[0]["waiting"].startswith("waiting for S3: no answer from " + s3.endpoint)
        model = tmp_path / "m" / "tiny"
        assert {n: hashlib.sha256((model / n).read_bytes()).hexdigest() for n in FILES} == checksums(FILES)
        assert 4.0 < took < 60
        print(f"outage 4.0 s: waited {waiting[-1]['outage']['waited_seconds']} s, {len(waiting)} tries failed; "
              f"fetch {took:.1f} s")


def test_an_outage_longer_than_the_budget_ends_with_model_fetch_failed_naming_it(tmp_path):
    with S3Server() as s3:
        bucket = upload(s3, FILES)
        start = time.monotonic()
        proc = fetcher(s3, bucket, tmp_path, budget=2)
        stop_mid_fetch(proc, s3, down_seconds=None)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - start
        assert proc.returncode == 1, err[-3000:]
        message = (tmp_path / "termination-log").read_text()
        assert message.startswith("ModelFetchFailed: S3 outage: the store did not answer for "), message
        assert "past the outage budget of 2s (spec.model.source.s3.maxOutageSeconds); last: s3://" in message
        assert "no answer from " + s3.endpoint in message
        waited = float(message.split("did not answer for ")[1].split("s,")[0])
        assert 2 <= waited < 20 and took < 30
        print(f"budget 2 s: failed after waiting {waited} s; fetch {took:.1f} s")


@pytest.mark.parametrize("case, words", [("wrong secret", "refused the credentials"),
                                         ("no such bucket", "the bucket does not exist")])
def test_a_403_or_404_fails_at_once_with_a_long_budget(tmp_path, case, words):
    with S3Server() as s3:
        bucket = upload(s3, FILES)
        start = time.monotonic()
        proc = fetcher(s3, bucket + "-gone" if case == "no such bucket" else bucket, tmp_path, budget=300,
                       secret="not-the-secret" if case == "wrong secret" else None)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - start
        assert proc.returncode == 1, err[-3000:]
        message = (tmp_path / "termination-log").read_text()
        assert message.startswith("ModelFetchFailed: ") and words in message, message
        assert "waiting" not in out and took < 10
