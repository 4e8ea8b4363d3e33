"""A node cache's key is never evicted while a server reads it: a real `python -m ocr_server` whose
model directory links to key A of the cache (as the model-fetch init container leaves it), and real
`python -m ocr_server.fetch` runs against versitygw for other keys past the cache's bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from localcluster.s3server import S3Server
from ocr_server.fetch.cache import link
from ocr_server.runtime.modelcache import lock_file
from ocr_server_testing.tiny_model import write_tiny_model

from ..unit.server.fetch_support import checksums, upload
from .conftest import ROOT, start_server

HOUR = 3600


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


def aged(path: Path, hours: float) -> None:
    os.utime(path, (path.stat().st_atime, time.time() - hours * HOUR))


def published(cache: Path, key: str, hours_ago: float, files: dict[str, bytes] | None = None) -> Path:
    """A key as a fetcher leaves it (its directory, its lock file), last used `hours_ago`."""
    path = cache / key
    if files is None:
        write_tiny_model(path, layout="native")
    else:
        path.mkdir(parents=True)
        for name, data in files.items():
            (path / name).write_bytes(data)
    lock_file(cache, key).parent.mkdir(parents=True, exist_ok=True)
    lock_file(cache, key).touch()
    aged(path, hours_ago)
    return path


def fetch(s3, cache: Path, tmp: Path, files: dict[str, bytes], max_bytes: int = 0, **env: str) -> dict:
    """`python -m ocr_server.fetch` as the init container runs it (`env` added); its final JSON line."""
    bucket = upload(s3, files)
    (tmp / "config").mkdir(exist_ok=True)
    (tmp / "config" / f"{bucket}.json").write_text(json.dumps(checksums(files)))
    env = {**os.environ, "FETCH_URL": f"s3://{bucket}/models/tiny", "FETCH_CACHE_DIR": str(cache),
           "FETCH_LINK": str(tmp / "links" / bucket), "FETCH_CHECKSUMS_FILE": str(tmp / "config" / f"{bucket}.json"),
           "FETCH_CACHE_MAX_BYTES": str(max_bytes), "FETCH_TERMINATION_LOG": "", "AWS_ACCESS_KEY_ID": s3.access_key,
           "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.region, **env}
    proc = subprocess.run([sys.executable, "-m", "ocr_server.fetch"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def serving(tmp: Path, cache: Path, key: str):
    """The server, its model directory linked to `key`, once its port answers (loading or ready)."""
    link(tmp / "models" / "org" / "tiny", cache / key)
    server = start_server(tmp, {"CACHE_DIR": str(tmp / "models"), "MODEL_NAME": "org/tiny", "LOAD_DELAY_SEC": "2"},
                          wait_ready=False)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert server.proc.poll() is None, server.log()[-3000:]
        try:
            httpx.get(server.url + "/health", timeout=5)
            return server
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(server.log()[-3000:])


def test_a_key_a_running_server_reads_is_not_evicted_until_the_server_exits(s3, tmp_path):
    cache = tmp_path / "cache"
    a, c = "sha256-" + "a" * 64, "sha256-" + "c" * 64
    published(cache, a, hours_ago=3)
    published(cache, c, hours_ago=2, files={"c.bin": b"c" * 4000})
    b, d = {"b.bin": b"b" * 4000}, {"d.bin": b"d" * 4000}
    server = serving(tmp_path, cache, a)
    try:
        # A (the oldest) and C are past the bound with B: C goes, A is held by the loading server.
        assert fetch(s3, cache, tmp_path, b, max_bytes=9000)["evicted"] == [c]
        assert (cache / a / "config.json").is_file()
    finally:
        server.stop()
    assert fetch(s3, cache, tmp_path, d, max_bytes=9000)["evicted"] == [a]


def test_a_server_whose_key_was_evicted_before_it_took_the_lock_says_so(tmp_path):
    cache = tmp_path / "cache"
    key = "sha256-" + "e" * 64
    published(cache, key, hours_ago=1, files={"config.json": b"{}"})
    link(tmp_path / "models" / "org" / "tiny", cache / key)
    (cache / key / "config.json").unlink()
    (cache / key).rmdir()
    server = start_server(tmp_path, {"CACHE_DIR": str(tmp_path / "models"), "MODEL_NAME": "org/tiny"},
                          wait_ready=False)
    assert server.proc.wait(60) == 2
    assert f"links to {cache / key}, which the node's cache no longer holds (evicted before this server" in server.log()


def test_a_key_another_pod_fetched_moments_ago_is_not_evicted_before_its_server_starts(s3, tmp_path):
    cache = tmp_path / "cache"
    just, old = "sha256-" + "f" * 64, "sha256-" + "0" * 64
    published(cache, just, hours_ago=0, files={"f.bin": b"f" * 4000})  # its server not started yet
    published(cache, old, hours_ago=2, files={"o.bin": b"o" * 4000})
    assert fetch(s3, cache, tmp_path, {"b.bin": b"b" * 4000}, max_bytes=4500)["evicted"] == [old]
    assert (cache / just / "f.bin").is_file()


def test_a_second_pod_reuses_the_copy_a_running_server_holds_without_waiting_for_it(s3, tmp_path):
    cache, files = tmp_path / "cache", {"x.bin": b"x" * 4000}
    first = fetch(s3, cache, tmp_path, files)
    # The server's own hold (modelcache.hold on the link the fetch made), in a process that keeps it.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from ocr_server.runtime.modelcache import hold; hold(Path(sys.argv[1])); "
                               "print('held', flush=True); time.sleep(120)", first["path"]],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        again = fetch(s3, cache, tmp_path, files, FETCH_TIMEOUT_SECONDS="10")
        assert again["cache"] == "hit" and again["key"] == first["key"] and time.monotonic() - t0 < 8
    finally:
        holder.kill()
        holder.wait()
