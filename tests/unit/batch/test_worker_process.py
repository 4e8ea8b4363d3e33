"""The worker as a real process (`python -m ocr_batch_worker`) where no server is needed: a
server that never answers, an output it cannot write, an input that is not there. The runs with a
real server are tests/server/test_batch_worker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from localcluster.ports import free_port
from ocr_batch_worker.contract import EXIT_FATAL

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64  # only sniffed here: no request is answered


def run(tmp: Path, env: dict[str, str] | None = None, **config) -> subprocess.CompletedProcess:
    doc = {"serviceUrl": f"http://127.0.0.1:{free_port()}", "input": {"pvc": {"path": str(tmp / "in")}},
           "output": {"pvc": {"path": str(tmp / "out")}}, "maxRetries": 1, **config}
    return subprocess.run([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "BATCH_CONFIG": json.dumps(doc), **(env or {})})


def errors(tmp: Path) -> list[dict]:
    """Every entry of the errors objects (one per failed document)."""
    return [json.loads(line) for f in sorted((tmp / "out" / "errors").glob("index-00000.*.jsonl"))
            for line in f.read_text().splitlines()]


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(PNG)
    return tmp_path


def test_a_page_no_server_answers_fails_after_its_retries_and_the_batch_ends(folder):
    proc = run(folder)
    assert proc.returncode == 0, proc.stderr
    [entry] = errors(folder)
    assert (entry["document"], entry["page"], entry["status"]) == ("a.png", 1, None)
    assert entry["error"].startswith("no answer after 2 attempts: ")
    progress = json.loads((folder / "out" / "progress" / "index-00000.json").read_text())
    assert (progress["pages_failed"], progress["retries"], progress["finished"]) == (1, 1, True)
    assert (progress["documents_done"], progress["documents_failed"]) == (0, 1)  # no page read: failed


def test_an_output_that_cannot_be_written_stops_the_worker_saying_so(folder):
    (folder / "out").write_bytes(b"a file, not a directory")
    proc = run(folder)
    assert proc.returncode == EXIT_FATAL and "cannot be written" in proc.stderr


def test_an_input_that_is_not_there_stops_the_worker_saying_so(folder):
    proc = run(folder, input={"pvc": {"path": str(folder / "nope")}})
    assert proc.returncode == EXIT_FATAL and "the input cannot be listed" in proc.stderr and "nope" in proc.stderr


def test_an_invalid_configuration_stops_the_worker_naming_the_field(folder):
    proc = run(folder, parallelism=0)
    assert proc.returncode == EXIT_FATAL and "invalid configuration: parallelism: 0 is not in 1..64" in proc.stderr


def test_each_report_is_a_line_on_stdout_and_the_last_one_the_termination_message(folder):
    message = folder / "termination-log"
    message.write_bytes(b"")
    proc = run(folder, env={"TERMINATION_LOG": str(message)})
    reports = [json.loads(line)["progress"] for line in proc.stdout.splitlines() if line.startswith('{"progress": ')]
    assert reports and reports[-1]["finished"] and reports[-1]["pages_failed"] == 1
    assert json.loads(message.read_text()) == json.loads((folder / "out" / "progress" / "index-00000.json").read_text())


def test_a_document_whose_result_name_is_too_long_fails_alone(tmp_path):
    (tmp_path / "in").mkdir()
    name = "n" * 250 + ".png"  # fits the filesystem; with .<hash>.jsonl its result does not
    (tmp_path / "in" / name).write_bytes(PNG)
    proc = run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    [entry] = errors(tmp_path)
    assert entry["document"] == name and entry["error"].startswith("its result cannot be written")
