"""The workers check their input at start (the operator never connects to a batch's storage): the
worker (`python -m ocr_batch_worker`, a real process) lists an S3 input on a real versitygw before
anything else, and a missing bucket or prefix, refused credentials or a malformed endpoint ends it
with the fatal exit (78: the Job fails the index at once) and a termination message naming why,
with a reason the operator makes the batch's Failed condition; no credential is in either."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from localcluster.ports import free_port
from localcluster.s3server import S3Server
from ocr_batch_worker.contract import EXIT_DONE, EXIT_FATAL
from ocr_batch_worker.progress import summarize
from ocr_operator.ocrbatch import decide

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        client = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=server.access_key,
                              aws_secret_access_key=server.secret_key, region_name=server.region)
        client.create_bucket(Bucket="docs")
        client.put_object(Bucket="docs", Key="in/a.txt", Body=b"not a document the model reads")
        yield server


def start(s3: S3Server, tmp: Path, url: str, **over: str) -> tuple[int, str, dict | None]:
    """The worker of index 0 on input `url` (output on a folder): its exit status, its log and its
    termination message (None: none written)."""
    message = tmp / "termination-log"
    message.write_bytes(b"")  # the kubelet's file: the worker writes it only where it exists
    doc = {"serviceUrl": f"http://127.0.0.1:{free_port()}", "input": {"s3": {"url": url}},
           "output": {"pvc": {"path": str(tmp / "out")}}, "maxRetries": 0, "limits": {"storageRetrySeconds": 2}}
    env = {"INPUT_AWS_ACCESS_KEY_ID": s3.access_key, "INPUT_AWS_SECRET_ACCESS_KEY": s3.secret_key,
           "INPUT_AWS_ENDPOINT_URL": s3.endpoint, "INPUT_AWS_REGION": s3.region, **over}
    proc = subprocess.run([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120,
                          env={**os.environ, "BATCH_CONFIG": json.dumps(doc), "TERMINATION_LOG": str(message), **env})
    text = message.read_text()
    return proc.returncode, proc.stdout, json.loads(text) if text else None


def failed_batch(report: dict) -> decide.Phase:
    """What the operator makes of a failed index's termination message (controller._summary, phase_of)."""
    summary = summarize([decide.report_from_message(json.dumps(report))], 1)
    return decide.phase_of({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedIndexes",
                                                       "message": "Job has failed indexes"}]}}, summary)


def test_an_input_that_lists_runs_as_before(s3, tmp_path):
    status, log, report = start(s3, tmp_path, "s3://docs/in/")
    assert status == EXIT_DONE, log
    assert report["finished"] and report["fatal"] is None and report["documents_failed"] == 1, report


def test_a_missing_bucket_ends_the_worker_fatally_and_the_batch_fails_with_input_not_found(s3, tmp_path):
    status, log, report = start(s3, tmp_path, "s3://nobucket/in/")
    assert status == EXIT_FATAL, log
    assert report["index"] == 0 and report["fatal_reason"] == "InputNotFound", report
    assert report["fatal"] == f"the input cannot be listed: bucket 'nobucket' does not exist on {s3.endpoint}"
    phase = failed_batch(report)
    assert (phase.phase, phase.reason) == (decide.FAILED, "InputNotFound")
    assert phase.message == f"Job has failed indexes: {report['fatal']}"


def test_a_prefix_without_objects_is_input_not_found(s3, tmp_path):
    status, log, report = start(s3, tmp_path, "s3://docs/2027/")
    assert status == EXIT_FATAL, log
    assert report["fatal_reason"] == "InputNotFound"
    assert report["fatal"].startswith("the input cannot be listed: no object under s3://docs/2027/"), report


def test_refused_credentials_end_the_worker_fatally_naming_no_credential(s3, tmp_path):
    status, log, report = start(s3, tmp_path, "s3://docs/in/", INPUT_AWS_SECRET_ACCESS_KEY="wrong-secret-key-0000")
    assert status == EXIT_FATAL, log
    assert report["fatal_reason"] == "InputCredentialsRejected", report
    assert "rejected the credentials" in report["fatal"] and report["fatal"].endswith("check the credentials Secret")
    for secret in (s3.access_key, s3.secret_key, "wrong-secret-key-0000"):
        assert secret not in report["fatal"] and secret not in log
    assert failed_batch(report).reason == "InputCredentialsRejected"


def test_a_malformed_endpoint_ends_the_worker_with_a_termination_message_too(s3, tmp_path):
    status, log, report = start(s3, tmp_path, "s3://docs/in/", INPUT_AWS_ENDPOINT_URL="ftp://s3.example")
    assert status == EXIT_FATAL, log
    assert report is not None, "no termination message: the operator would show only the Job's reason"
    assert (report["index"], report["fatal_reason"]) == (0, "InvalidConfiguration")
    assert report["fatal"].startswith("input.s3: endpoint_url: 'ftp://s3.example' is not an http(s)"), report
    assert failed_batch(report).reason == "InvalidConfiguration"


def test_a_reason_outside_the_contract_is_not_made_a_condition_reason():
    # A termination message is any pod's to write: only the contract's words become the reason.
    for said in ("Not a reason!", {"x": 1}, ["InputNotFound"]):
        assert failed_batch({"index": 0, "fatal": "boom", "fatal_reason": said}).reason == "FailedIndexes"


def test_a_configuration_that_does_not_load_leaves_a_termination_message_naming_why(tmp_path):
    message = tmp_path / "termination-log"
    message.write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120,
                          env={**os.environ, "BATCH_CONFIG": "[1, 2]", "JOB_COMPLETION_INDEX": "3",
                               "TERMINATION_LOG": str(message)})
    assert proc.returncode == EXIT_FATAL, proc.stdout
    text = message.read_text()
    assert text, "no termination message: the operator would show only the Job's reason"
    report = json.loads(text)
    assert (report["index"], report["fatal_reason"]) == (3, "InvalidConfiguration"), report
    assert report["fatal"] == "BATCH_CONFIG is not a JSON object"
    assert failed_batch(report).reason == "InvalidConfiguration"
