"""Poison documents (ocr_batch_worker.attempts): a document that kills the worker is quarantined
after a bounded number of attempts, and its shard goes on. The worker runs as a real process and
is killed for real (SIGKILL, as the kernel's OOM killer does) while it holds the document."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from ocr_batch_worker import contract, results
from ocr_batch_worker.attempts import MAX_ATTEMPTS, POISON, Marker, plan
from ocr_batch_worker.storage import FileStore
from ocr_batch_worker import worker as worker_module
from ocr_batch_worker.worker import Worker

from .pageserver import PageServer
from .workerrun import worker_config

ROOT = Path(__file__).resolve().parents[3]


def marker(attempts: int = 1, alone: bool = False, released: bool = False, sha: str = "s") -> Marker:
    return Marker("a.pdf", sha, attempts, alone, released, pod="batch-0-abc")


def test_a_document_never_begun_or_changed_since_runs_with_the_others():
    assert plan(None, "s", 4).action == "run"
    assert plan(marker(sha="old"), "s", 4).action == "run"


def test_a_document_an_earlier_worker_died_holding_runs_again_alone():
    p = plan(marker(attempts=1), "s", 4)
    assert (p.action, p.attempts) == ("alone", 2)


def test_a_document_that_killed_a_worker_alone_is_poison_with_what_is_known_of_the_last_attempt():
    p = plan(marker(attempts=2, alone=True), "s", 4)
    assert p.action == POISON and p.reason.startswith("poison: the worker was killed 2 time(s) while it held this "
                                                      "document, with no other document in flight (last: pod "
                                                      "batch-0-abc): out of memory or a crash")


def test_attempts_are_bounded_even_when_never_alone_and_a_graceful_stop_does_not_count():
    assert plan(marker(attempts=MAX_ATTEMPTS), "s", 4).action == POISON
    assert plan(marker(attempts=2, released=True), "s", 4).action == "run"
    assert plan(None, "s", 1).action == "alone"  # one at a time: every attempt is alone


def test_a_torn_marker_reads_as_none():
    assert Marker.parse(b'{"document": "a"') is None
    assert Marker.parse(marker().to_json()) == marker()


def hanging_png() -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("note", "HANG")  # the server never answers it: the worker holds it until killed
    buf = io.BytesIO()
    Image.new("RGB", (30, 20)).save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def start(tmp: Path, url: str, concurrency: int) -> subprocess.Popen:
    doc = {"serviceUrl": url, "input": {"pvc": {"path": str(tmp / "in")}}, "output": {"pvc": {"path": str(tmp / "out")}},
           "maxRetries": 0, "requestTimeoutSeconds": 600, "concurrencyPerWorker": concurrency}
    return subprocess.Popen([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**os.environ, "BATCH_CONFIG": json.dumps(doc)})


def wait_for_marker(proc: subprocess.Popen, path: Path, alone: bool, timeout: float = 60) -> Marker:
    """The document's marker as a running worker holds it (not released: not an earlier worker's)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()
        if path.exists() and (m := Marker.parse(path.read_bytes())) is not None and m.alone == alone \
                and not m.released:
            return m
        time.sleep(0.05)
    raise AssertionError(f"no marker {path} with alone={alone}")


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "in").mkdir()
    for name in ("a.png", "c.png", "d.png"):
        img = io.BytesIO()
        Image.new("RGB", (30, 20), (len(name), 0, 0)).save(img, "PNG")
        (tmp_path / "in" / name).write_bytes(img.getvalue())
    (tmp_path / "in" / "b-kills.png").write_bytes(hanging_png())
    return tmp_path


def test_a_document_killing_the_worker_twice_is_quarantined_as_poison_and_the_shard_goes_on(corpus):
    path = corpus / "out" / results.attempt_key(0, "b-kills.png")
    with PageServer() as server:
        first = start(corpus, server.url, concurrency=2)
        wait_for_marker(first, path, alone=False)
        first.kill()  # SIGKILL while it holds the document, with another in flight
        first.wait()
        second = start(corpus, server.url, concurrency=2)
        assert wait_for_marker(second, path, alone=True).attempts == 2
        second.kill()
        second.wait()
        third = start(corpus, server.url, concurrency=2)
        _, stderr = third.communicate(timeout=60)
    assert third.returncode == contract.EXIT_DONE, stderr.decode()
    entries = [json.loads(line) for f in (corpus / "out" / "errors").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [(e["document"], e["error"].split(":")[0]) for e in entries] == [("b-kills.png", POISON)]
    assert "killed 2 time(s)" in entries[0]["error"]
    progress = json.loads((corpus / "out" / "progress" / "index-00000.json").read_text())
    assert (progress["documents_done"], progress["documents_failed"], progress["finished"]) == (3, 1, True)


def test_a_worker_stopped_gracefully_does_not_count_against_the_documents_it_held(corpus):
    path = corpus / "out" / results.attempt_key(0, "b-kills.png")
    with PageServer() as server:
        first = start(corpus, server.url, concurrency=2)
        wait_for_marker(first, path, alone=False)
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=30) == contract.EXIT_TERMINATED
        assert Marker.parse(path.read_bytes()).released
        second = start(corpus, server.url, concurrency=2)
        assert wait_for_marker(second, path, alone=False).attempts == 1  # with the others, not suspect
        second.kill()
        second.wait()


class FirstWriteHeld(FileStore):
    """A real folder whose first write waits until let go: a marker's write still in flight (slow
    storage) when the SIGTERM comes."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writing, self.go = threading.Event(), threading.Event()

    def put(self, key: str, data: bytes) -> None:
        if not self.writing.is_set():
            self.writing.set()
            assert self.go.wait(30)
        super().put(key, data)


async def sigterm_mid_write(tmp_path: Path, sink: FirstWriteHeld) -> Worker:
    """A worker whose first document's marker write is in flight (held by `sink`) when SIGTERM
    cancels the task the document runs in, as program.serve does: what release() then meets."""
    worker = Worker(worker_config(tmp_path, "http://127.0.0.1:9"), FileStore(tmp_path / "in"), sink, send=None,
                    emit=lambda report: None)
    begun = asyncio.create_task(worker.begin("a.png", "s", plan(None, "s", 2)))
    assert await asyncio.to_thread(sink.writing.wait, 30)
    begun.cancel()
    with pytest.raises(asyncio.CancelledError):
        await begun
    return worker


def held_first_write(tmp_path: Path) -> tuple[FirstWriteHeld, Path]:
    """The batch's folders, a sink whose first write waits, and where a.png's marker lands."""
    for folder in ("in", "out"):
        (tmp_path / folder).mkdir()
    return FirstWriteHeld(tmp_path / "out"), tmp_path / "out" / results.attempt_key(0, "a.png")


def test_a_sigterm_during_the_markers_write_still_releases_the_document_after_that_write(tmp_path):
    sink, path = held_first_write(tmp_path)

    async def release_after_sigterm() -> None:
        worker = await sigterm_mid_write(tmp_path, sink)
        releasing = asyncio.create_task(worker.release())
        try:
            await asyncio.sleep(0.3)
            assert not releasing.done()  # it waits for the held marker's write, which would land after it
        finally:
            sink.go.set()
        await releasing

    asyncio.run(release_after_sigterm())
    marker = Marker.parse(path.read_bytes())
    assert marker.released and marker.attempts == 1


def test_a_marker_write_stuck_past_the_bound_does_not_hold_the_stop(tmp_path, monkeypatch):
    """A write stuck in slow storage holds the graceful stop MARKER_WRITE_WAIT_SECONDS at most;
    landing later, it leaves the document counted as held by a killed worker (the safe side)."""
    monkeypatch.setattr(worker_module, "MARKER_WRITE_WAIT_SECONDS", 0.3)
    sink, path = held_first_write(tmp_path)

    async def release_after_sigterm() -> float:
        worker = await sigterm_mid_write(tmp_path, sink)
        t0 = time.monotonic()
        try:
            await worker.release()
            assert Marker.parse(path.read_bytes()).released  # the stop went on and wrote its marker
        finally:
            sink.go.set()  # the stuck write lands now, after it
        return time.monotonic() - t0

    took = asyncio.run(release_after_sigterm())
    assert took < 5
    assert not Marker.parse(path.read_bytes()).released
