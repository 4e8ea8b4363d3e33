"""The OcrBatch worker (`python -m ocr_batch_worker`) as real processes against a real server.

One server (the tiny model, 2 new tokens, a batch-shedding threshold of 1 waiting request) and a
folder of mixed documents: a 12-page PDF, a PNG, a 2-page TIFF, an OpenAI batch file, and bad
ones (corrupt PDF, PDF without pages, empty file, unsupported type, truncated PNG, too large, too
many pages). The
two indices of a parallelism-2 batch run side by side, then again as a restart. What is counted
comes from the server's own /metrics, not from the worker.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from . import samples
from .conftest import ROOT, start_server

pytestmark = pytest.mark.server

GOOD_PAGES = {"scans/report.pdf": 12, "photo.png": 1, "fax.tiff": 2}
MODEL = "deepseek-ai/DeepSeek-OCR-2"
MAX_BYTES = 300_000



def chat_line(custom_id: str, model: str) -> str:
    url = "data:image/png;base64," + base64.b64encode(samples.png(120, 90, seed=7)).decode()
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Free OCR."}]}]}})


def write_documents(folder: Path) -> None:
    (folder / "scans").mkdir(parents=True)
    (folder / "scans" / "report.pdf").write_bytes(samples.pdf_of_sizes([(200 + 10 * i, 150) for i in range(12)]))
    (folder / "photo.png").write_bytes(samples.png(300, 200, seed=3))
    (folder / "fax.tiff").write_bytes(samples.multipage_tiff(2))
    (folder / "requests.jsonl").write_text(chat_line("good", MODEL) + "\n" + chat_line("wrong-model", "gpt-4o") + "\n")
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not a PDF body\n")
    (folder / "empty.pdf").write_bytes(samples._pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>",
                                                      b"<< /Type /Pages /Kids [] /Count 0 >>"]))
    (folder / "zero.pdf").write_bytes(b"")
    (folder / "notes.docx").write_bytes(b"PK\x03\x04 not a document the model reads")
    (folder / "truncated.png").write_bytes(samples.png(300, 200, seed=4)[:80])
    (folder / "big.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(MAX_BYTES))
    (folder / "long.pdf").write_bytes(samples.pdf_of_sizes([(100, 100)] * 13))


def requests_by_status(url: str) -> dict[tuple[str, str], float]:
    """ocr_requests_total summed over request classes, by (endpoint, status)."""
    out: dict[tuple[str, str], float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r'ocr_requests_total\{(.*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            key = (labels["endpoint"], labels["status"])
            out[key] = out.get(key, 0) + float(m.group(2))
    return out


def run_indices(config: dict, shards: int) -> tuple[list[int], float]:
    """Every index of the batch as its own worker process, side by side; (exit codes, seconds)."""
    start = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              env={**os.environ, "BATCH_CONFIG": json.dumps(config), "JOB_COMPLETION_INDEX": str(i)})
             for i in range(shards)]
    codes = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            print(out.decode(errors="replace"))
        codes.append(p.returncode)
    return codes, time.monotonic() - start


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def inodes(folder: Path) -> dict[str, int]:
    """Each file's inode: a put (temporary file + rename) gives a file a new one, even with the same bytes."""
    return {p.relative_to(folder).as_posix(): p.stat().st_ino for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def batch(tiny_native, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("batch")
    server = start_server(tmp, {"MODEL_PATH": str(tiny_native), "MAX_NEW_TOKENS": "2", "MAX_PAGES": "3",
                                "BATCH_QUEUE_THRESHOLD": "1", "TIMEOUT_SEC": "120"})
    try:
        write_documents(tmp / "in")
        config = {"serviceUrl": server.url, "input": {"pvc": {"path": str(tmp / "in")}},
                  "output": {"pvc": {"path": str(tmp / "out")}}, "options": {"mode": "free", "maxNewTokens": 2},
                  "parallelism": 2, "concurrencyPerWorker": 16, "progressIntervalSeconds": 1, "maxRetries": 2,
                  "limits": {"maxDocumentBytes": MAX_BYTES, "maxPagesPerDocument": 12}}
        before = requests_by_status(server.url)
        first_codes, first_s = run_indices(config, 2)
        after_first = requests_by_status(server.url)
        written, first_inodes = snapshot(tmp / "out"), inodes(tmp / "out")
        progress_first = [json.loads(written[f"progress/index-{i:05d}.json"]) for i in range(2)]
        second_codes, second_s = run_indices(config, 2)
        after_second = requests_by_status(server.url)
        print(f"\nbatch worker: first run {first_s:.1f} s, restart {second_s:.1f} s")
        yield {"out": tmp / "out", "codes": first_codes + second_codes, "written": written,
               "inodes": (first_inodes, inodes(tmp / "out")), "progress": progress_first,
               "sent": {k: after_first.get(k, 0) - before.get(k, 0) for k in after_first},
               "resent": {k: after_second.get(k, 0) - after_first.get(k, 0) for k in after_second}}
    finally:
        server.stop()


def results_of(written: dict[str, bytes], document: str) -> list[dict]:
    [key] = [k for k in written if re.fullmatch(rf"results/{re.escape(document)}\.[0-9a-f]{{16}}\.jsonl", k)]
    return [json.loads(line) for line in written[key].decode().splitlines()]


def errors_of(written: dict[str, bytes]) -> list[dict]:
    return [json.loads(line) for k, v in written.items() if k.startswith("errors/") for line in v.decode().splitlines()]


def test_the_workers_end_well_with_bad_documents_in_the_input(batch):
    assert batch["codes"] == [0, 0, 0, 0]


def test_every_good_page_has_one_result_and_was_sent_exactly_once(batch):
    written = batch["written"]
    for document, pages in GOOD_PAGES.items():
        records = results_of(written, document)
        assert [r["page"] for r in records] == list(range(1, pages + 1)), document
        assert all("error" not in r and r["usage"]["generated_tokens"] >= 1 and r["model"]["revision"] for r in records)
        assert any(k.endswith(".md") and k.startswith(f"results/{document}.") for k in written)
    assert batch["sent"].get(("/v1/ocr", "200")) == sum(GOOD_PAGES.values())


def test_a_batch_file_gets_an_openai_batch_output_line_per_request(batch):
    lines = results_of(batch["written"], "requests.jsonl")
    assert [(x["custom_id"], x["response"]["status_code"]) for x in lines] == [("good", 200), ("wrong-model", 404)]
    assert lines[0]["response"]["body"]["object"] == "chat.completion" and lines[0]["error"] is None
    assert batch["sent"].get(("/v1/chat/completions", "200")) == 1


def test_each_bad_document_is_in_the_errors_file_with_its_reason(batch):
    errors = {(e["document"], e["page"]): e for e in errors_of(batch["written"])}
    assert set(errors) == {("corrupt.pdf", None), ("empty.pdf", None), ("notes.docx", None), ("truncated.png", 1),
                           ("big.png", None), ("long.pdf", None), ("requests.jsonl", 2),
                           ("zero.pdf", None)}
    assert errors["corrupt.pdf", None]["error"] == errors["empty.pdf", None]["error"] == (
        "the PDF could not be opened: it is damaged, encrypted or has no pages")
    assert errors["zero.pdf", None]["error"] == "the file is empty"
    assert errors["notes.docx", None]["error"].startswith("unsupported type")
    assert errors["truncated.png", 1]["status"] == 400 and "truncated" in errors["truncated.png", 1]["error"]
    assert f"the limit is {MAX_BYTES}" in errors["big.png", None]["error"]
    assert "the PDF has 13 pages; the limit is 12" in errors["long.pdf", None]["error"]
    assert "gpt-4o" in errors["requests.jsonl", 2]["error"]


def test_requests_shed_with_429_are_waited_out_and_sent_again(batch):
    """Pages (/v1/ocr) and the batch file's lines (/v1/chat/completions) are both shed and resent."""
    shed = sum(p["requests_shed"] for p in batch["progress"])
    answered_429 = sum(batch["sent"].get((path, "429"), 0) for path in ("/v1/ocr", "/v1/chat/completions"))
    assert shed >= 1 and answered_429 == shed


def test_the_progress_files_add_up_to_the_batch(batch):
    progress = batch["progress"]
    assert all(p["finished"] for p in progress)
    assert sum(p["documents_total"] for p in progress) == 11
    assert sum(p["pages_done"] for p in progress) == sum(GOOD_PAGES.values()) + 1  # + the batch file's good line
    assert sum(p["pages_failed"] for p in progress) == 2  # truncated.png, the batch file's wrong model


def test_a_restarted_batch_sends_nothing_and_rewrites_no_result(batch):
    assert {k: v for k, v in batch["resent"].items() if v} == {}
    first, second = ({k: v for k, v in files.items() if not k.startswith("progress/")} for files in batch["inodes"])
    assert second == first  # the same results and errors files, none written again
