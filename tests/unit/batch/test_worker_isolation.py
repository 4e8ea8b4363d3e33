"""Per-document isolation (ocr_batch_worker.worker): a poison corpus of real files, run by the
worker in this process against a real HTTP server. Every bad document is its own errors entry with
its reason, every good page has its result, and the shard finishes."""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
from PIL import Image, PngImagePlugin

from ocr_batch_worker import results
from ocr_batch_worker.storage import FileStore
from tests.server import samples

from .corpus import BOMB_REFUSAL, chat_line, deep_line, image, png_header_only, tiff_header_only
from .pageserver import PageServer
from .workerrun import run, worker_config


def png_saying(text: str, size: tuple[int, int] = (40, 30)) -> bytes:
    info = PngImagePlugin.PngInfo()
    info.add_text("note", text)
    buf = io.BytesIO()
    Image.new("RGB", size, (0, 90, 0)).save(buf, "PNG", pnginfo=info)
    return buf.getvalue()


def errors_by_document(out: Path) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for f in sorted((out / "errors").glob("*.jsonl")):
        for line in f.read_text().splitlines():
            entry = json.loads(line)
            found.setdefault(entry["document"], []).append(entry)
    return found


def result_lines(out: Path, document: str) -> list[dict]:
    [path] = [p for p in (out / "results").glob(f"{document}.*.jsonl")]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def server():
    with PageServer() as s:
        yield s


def test_a_poison_corpus_gives_each_bad_document_its_reason_and_the_shard_finishes(tmp_path, server):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "a-good.png").write_bytes(png_saying("fine"))
    (inp / "b-deep.jsonl").write_text(chat_line("good-line") + "\n" + deep_line("deep-line") + "\n")
    (inp / "c-bomb.tif").write_bytes(tiff_header_only(20_000, 10_000))
    (inp / "d-bomb.png").write_bytes(png_header_only(20_000, 10_000))
    (inp / "e-refused.png").write_bytes(png_saying("REFUSE"))
    (inp / "f-pages.tif").write_bytes(image("TIFF", frames=3))
    (inp / "g-report.pdf").write_bytes(samples.pdf_of_sizes([(100, 200), (200, 100)]))
    progress = run(worker_config(tmp_path, server.url, concurrencyPerWorker=3))
    out = tmp_path / "out"
    errors = errors_by_document(out)
    assert set(errors) == {"b-deep.jsonl", "c-bomb.tif", "d-bomb.png", "e-refused.png"}
    assert errors["b-deep.jsonl"] == [{"document": "b-deep.jsonl", "sha256": errors["b-deep.jsonl"][0]["sha256"],
                                      "page": 2, "error": "line 2 is nested more than 64 deep", "status": None}]
    assert re.search(BOMB_REFUSAL, errors["c-bomb.tif"][0]["error"]) and errors["c-bomb.tif"][0]["page"] in (None, 1)
    assert re.search(BOMB_REFUSAL, errors["d-bomb.png"][0]["error"])
    assert errors["e-refused.png"][0]["status"] == 413
    assert progress.finished and progress.fatal is None
    assert (progress.documents_done, progress.documents_failed) == (4, 3)  # a, b (one good line), f, g
    assert progress.pages_done == 1 + 1 + 3 + 2


def test_a_document_none_of_whose_pages_was_read_counts_failed_also_when_counted_again(tmp_path, server):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "refused.png").write_bytes(png_saying("REFUSE"))
    (tmp_path / "in" / "ok.png").write_bytes(png_saying("fine"))
    cfg = worker_config(tmp_path, server.url)
    first = run(cfg)
    again = run(cfg)  # the restart counts it from its result file
    for progress in (first, again):
        assert (progress.documents_done, progress.documents_failed, progress.pages_failed) == (1, 1, 1)
    assert again.documents_skipped == 2


def test_every_output_line_of_a_batch_file_carries_its_requests_custom_id_the_bad_lines_too(tmp_path, server):
    (tmp_path / "in").mkdir()
    lines = [chat_line("first"), chat_line("wrong-url", url="/v1/embeddings"), deep_line("deep"), "{not json",
             chat_line("last")]
    (tmp_path / "in" / "requests.jsonl").write_text("\n".join(lines) + "\n")
    run(worker_config(tmp_path, server.url))
    out = result_lines(tmp_path / "out", "requests.jsonl")
    assert [(o["custom_id"], o["error"] is None) for o in out] == [
        ("first", True), ("wrong-url", False), ("deep", False), ("", False), ("last", True)]


def test_a_multipage_tiff_is_sent_one_page_per_request_never_whole(tmp_path, server):
    (tmp_path / "in").mkdir()
    data = image("TIFF", size=(300, 200), frames=3)
    (tmp_path / "in" / "fax.tif").write_bytes(data)
    progress = run(worker_config(tmp_path, server.url))
    assert progress.pages_done == 3 and len(server.bodies) == 3
    assert all(data not in body and b'name="pages"' not in body for body in server.bodies)


def test_a_page_over_the_servers_body_limit_is_refused_before_it_is_sent(tmp_path, server):
    (tmp_path / "in").mkdir()
    noise = Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3))  # incompressible: about 12 KB
    buf = io.BytesIO()
    noise.save(buf, "PNG")
    (tmp_path / "in" / "big.png").write_bytes(buf.getvalue())
    progress = run(worker_config(tmp_path, server.url, maxBodyBytes=1024))
    [entry] = errors_by_document(tmp_path / "out")["big.png"]
    assert entry["error"] == (f"page 1 is {len(buf.getvalue())} bytes; the OcrService takes at most 1024 bytes per "
                              "request (its body limit)")
    assert server.bodies == [] and progress.documents_failed == 1


class Exploding(FileStore):
    """A real folder one of whose documents raises what no handler expects (as a decoder bug would)."""

    def get(self, key: str, max_bytes: int) -> bytes:
        if key == "boom.png":
            raise MemoryError("cannot allocate 2.1 GB")
        return super().get(key, max_bytes)


def test_an_unexpected_exception_reading_one_document_is_its_errors_entry_and_the_others_finish(tmp_path, server):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "boom.png").write_bytes(png_saying("x"))
    (tmp_path / "in" / "ok.png").write_bytes(png_saying("y"))
    cfg = worker_config(tmp_path, server.url)
    progress = run(cfg, source=Exploding(tmp_path / "in"))
    assert errors_by_document(tmp_path / "out")["boom.png"][0]["error"] == "MemoryError: cannot allocate 2.1 GB"
    assert (progress.documents_done, progress.documents_failed, progress.finished) == (1, 1, True)


def test_each_failed_document_is_one_errors_object_and_a_redo_replaces_it(tmp_path):
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"notes-{i}.txt").write_text("not a document")
    cfg = worker_config(tmp_path, "http://127.0.0.1:9")
    run(cfg)
    objects = sorted(p.name for p in (tmp_path / "out" / "errors").iterdir())
    assert len(objects) == 3 and all(len((tmp_path / "out" / "errors" / o).read_text().splitlines()) == 1
                                     for o in objects)
    for p in (tmp_path / "out" / "results").iterdir():  # every document done again
        p.unlink()
    run(cfg)
    assert sorted(p.name for p in (tmp_path / "out" / "errors").iterdir()) == objects
    assert results.errors_key(0, "notes-0.txt", None) != results.errors_key(0, "notes-0.txt", "ab")
