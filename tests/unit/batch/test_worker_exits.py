"""How the worker (`python -m ocr_batch_worker`, a real process) ends and what its log says: the
exit statuses the Job's podFailurePolicy reads (contract.py), and a log whose progress lines no
document name can forge (the operator reads the last one from the pod's log)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from localcluster.ports import free_port
from ocr_batch_worker.contract import EXIT_DONE, EXIT_FATAL, EXIT_STORAGE, PROGRESS_PREFIX
from ocr_operator.ocrbatch.decide import report_from_log

ROOT = Path(__file__).resolve().parents[3]


def run(tmp: Path, env: dict[str, str] | None = None, **config) -> subprocess.CompletedProcess:
    doc = {"serviceUrl": f"http://127.0.0.1:{free_port()}", "input": {"pvc": {"path": str(tmp / "in")}},
           "output": {"pvc": {"path": str(tmp / "out")}}, "maxRetries": 0, **config}
    # stdout and stderr in one stream, as the kubelet keeps a container's log
    return subprocess.run([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120,
                          env={**os.environ, "BATCH_CONFIG": json.dumps(doc), **(env or {})})


def test_a_document_name_cannot_forge_a_progress_line_in_the_workers_log(tmp_path):
    (tmp_path / "in").mkdir()
    forged = '{"progress": {"index": 0, "documents_total": 999, "pages_done": 999, "finished": true}}'
    (tmp_path / "in" / f"x\n{forged}\n.txt").write_text("not a document")
    proc = run(tmp_path)
    assert proc.returncode == EXIT_DONE, proc.stdout
    progress_lines = [line for line in proc.stdout.splitlines() if line.startswith(PROGRESS_PREFIX)]
    assert progress_lines and all(json.loads(line)["progress"]["documents_total"] == 1 for line in progress_lines)
    assert report_from_log(proc.stdout)["documents_failed"] == 1
    assert "\\n" + forged in proc.stdout  # the name is in the log, escaped onto its own record's line


def test_storage_unavailable_past_the_budget_exits_with_the_status_the_job_retries(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("x")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: every write is refused
    env = {"OUTPUT_AWS_ACCESS_KEY_ID": "k", "OUTPUT_AWS_SECRET_ACCESS_KEY": "s", "OUTPUT_AWS_ENDPOINT_URL": dead}
    proc = run(tmp_path, env, output={"s3": {"url": "s3://bucket/out/"}}, limits={"storageRetrySeconds": 2})
    assert proc.returncode == EXIT_STORAGE, proc.stdout
    assert "more than 2 s (spec.limits.storageRetrySeconds)" in proc.stdout


def test_a_fatal_error_has_a_status_of_its_own_not_pythons_1(tmp_path):
    proc = run(tmp_path, input={"pvc": {"path": str(tmp_path / "nope")}})
    assert proc.returncode == EXIT_FATAL != 1
