"""Two workers on one shard (a stalled pod's process resumed, or one on a lost node still running
after its replacement started) cannot corrupt the shard's output: every object is written whole
(a PVC file through a temporary file and a rename), each document's result and errors are one
object each, replaced whole by a second writer, and each pod attempt writes its own progress
object, so a stale worker's late report never replaces its successor's."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from ocr_batch_worker import results
from ocr_batch_worker.client import OcrClient
from ocr_batch_worker.patience import Outage, PatientStore
from ocr_batch_worker.storage import FileStore
from ocr_batch_worker.worker import Worker

from .corpus import image
from .pageserver import PageServer
from .workerrun import worker_config


def worker(cfg, pod: str, client: OcrClient) -> Worker:
    outage = Outage(cfg.storage_retry_seconds)
    return Worker(cfg, PatientStore(FileStore(cfg.input.path), outage), PatientStore(FileStore(cfg.output.path), outage),
                  client.send, emit=lambda report: None, pod=pod)


def corpus(tmp: Path) -> None:
    inp = tmp / "in"
    inp.mkdir()
    for i in range(6):
        (inp / f"doc-{i}.png").write_bytes(image("PNG", size=(30 + i, 20)))
    (inp / "pages.tif").write_bytes(image("TIFF", frames=3))
    (inp / "notes.txt").write_bytes(b"not a document")


def test_each_pod_attempt_of_an_index_has_a_progress_object_of_its_own():
    assert results.progress_key(3, "archive-3-x7k2p") == "progress/index-00003.archive-3-x7k2p.json"
    assert results.progress_key(3, "archive-3-q9z1m") != results.progress_key(3, "archive-3-x7k2p")
    assert results.progress_key(3) == "progress/index-00003.json"  # outside a pod
    assert results.progress_key(0, "../../x/") == "progress/index-00000.x.json"  # never a path


def test_a_stale_workers_late_report_does_not_replace_its_successors_finished_one(tmp_path):
    corpus(tmp_path)
    with PageServer() as server:
        cfg = worker_config(tmp_path, server.url)

        async def go() -> None:
            client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=cfg.request_timeout)
            try:
                stale = worker(cfg, "archive-0-aaaaa", client)  # frozen after its first report
                await stale.report(force=True)
                assert (await worker(cfg, "archive-0-bbbbb", client).run()).finished
                await stale.report(force=True)  # resumed: its report is as it was when it froze
            finally:
                await client.close()

        asyncio.run(go())
    out = tmp_path / "out" / "progress"
    new = json.loads((out / "index-00000.archive-0-bbbbb.json").read_text())
    old = json.loads((out / "index-00000.archive-0-aaaaa.json").read_text())
    assert new["finished"] and new["documents_done"] == 7 and new["documents_failed"] == 1
    assert not old["finished"]


def test_two_workers_at_once_on_one_shard_leave_every_result_whole_each_page_once(tmp_path):
    """Guard: this held before the progress objects were split (the writes were already whole)."""
    corpus(tmp_path)
    with PageServer(delay=0.01) as server:
        cfg = worker_config(tmp_path, server.url, concurrencyPerWorker=2)

        async def go() -> None:
            client = OcrClient(cfg.service_url, concurrency=4, timeout=cfg.request_timeout)
            try:
                done = await asyncio.gather(worker(cfg, "archive-0-aaaaa", client).run(),
                                            worker(cfg, "archive-0-bbbbb", client).run())
                assert all(p.finished for p in done)
            finally:
                await client.close()

        asyncio.run(go())
    out = tmp_path / "out"
    found = sorted(p.name for p in (out / "results").glob("*.jsonl"))
    assert len(found) == 8, found  # one result per document, whoever wrote it last
    for path in (out / "results").glob("*.jsonl"):
        lines = [json.loads(line) for line in path.read_text().splitlines()]  # every line whole
        pages = [line["page"] for line in lines]
        assert pages == sorted(set(pages)), (path.name, pages)  # each page once
    (tiff,) = (out / "results").glob("pages.tif.*.jsonl")
    assert [json.loads(line)["page"] for line in tiff.read_text().splitlines()] == [1, 2, 3]
    errors = list((out / "errors").glob("*.jsonl"))
    assert len(errors) == 1  # the unsupported file's one object, replaced whole, never a copy
    assert [json.loads(x)["document"] for x in errors[0].read_text().splitlines()] == ["notes.txt"]
    assert not [p for p in out.rglob(".tmp-*")]


def test_a_pvc_file_written_by_two_writers_at_once_is_always_one_of_them_whole(tmp_path):
    """Guard: FileStore.put writes a temporary file and renames it over the object."""
    store = FileStore(tmp_path)
    payloads = [bytes([65 + i]) * 400_000 for i in range(2)]
    store.put("results/doc.jsonl", payloads[0])
    seen: set[bytes] = set()
    stop = threading.Event()

    def write(data: bytes) -> None:
        while not stop.is_set():
            store.put("results/doc.jsonl", data)

    writers = [threading.Thread(target=write, args=(p,)) for p in payloads]
    for t in writers:
        t.start()
    try:
        for _ in range(300):
            seen.add(store.get("results/doc.jsonl", 1 << 20))
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert seen <= set(payloads)
