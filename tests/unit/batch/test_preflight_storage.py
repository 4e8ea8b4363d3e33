"""The operator never connects to a batch's storage (issue 35, item 5): the chart's NetworkPolicy
lets it reach the API server only (no DNS either), so an S3 batch starts whatever its endpoint is,
and the workers check their input at start (tests/unit/batch/test_input_check.py); the operator
makes a worker's verdict (its termination message) the batch's Failed condition. What the operator
checks itself is what the API says: the credentials Secret exists and holds the keys.

The S3 endpoint here is a socket on 127.0.0.1 that counts the connections it is offered, with the
egress allowlist naming loopback: an operator that lists the input itself would connect there."""

from __future__ import annotations

import base64
import json
import socket
import threading

import pytest

from ocr_operator.ocrbatch import egress

from tests.unit.batch.test_controller import NS, batch, reconcile, world
from tests.unit.batch.test_controller_decoys import STARTED, a_job, a_pod, controller_ref


class CountingEndpoint:
    """A TCP listener on 127.0.0.1 that accepts, counts and closes every connection."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def endpoint(monkeypatch):
    monkeypatch.setenv(egress.ALLOW_ENV, "127.0.0.1/32")  # the guard would let the operator connect
    ep = CountingEndpoint()
    yield ep
    ep.close()


def s3_secret(endpoint_url: str, **data: str) -> dict:
    values = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID0001", "AWS_SECRET_ACCESS_KEY": "secret-key-0000000000",
              "AWS_ENDPOINT_URL": endpoint_url, **data}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3", "namespace": NS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}


S3_INPUT = {"s3": {"url": "s3://docs/in/", "credentialsSecret": "s3"}}


def test_an_s3_batch_starts_its_job_without_the_operator_connecting_to_the_endpoint(endpoint):
    kube, batches = world(s3_secret(endpoint.url))
    reconcile(batches, batch(input=S3_INPUT))
    assert ("create", "Job", "archive") in kube.calls, kube.status
    assert (kube.status["phase"], kube.status["conditions"][0]["reason"]) == ("Pending", "JobCreated")
    assert endpoint.accepted == 0  # the workers list the input, from the batch's namespace
    env = {e["name"]: e for e in kube.objects[("Job", "archive")]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["INPUT_AWS_ENDPOINT_URL"]["valueFrom"]["secretKeyRef"]["name"] == "s3"


def test_an_s3_batch_whose_secret_lacks_a_key_is_still_held_by_the_operator(endpoint):
    secret = s3_secret(endpoint.url)
    del secret["data"]["AWS_SECRET_ACCESS_KEY"]
    kube, batches = world(secret)
    reconcile(batches, batch(input=S3_INPUT))
    ready = kube.status["conditions"][0]
    assert (kube.status["phase"], ready["reason"]) == ("Pending", "SecretNotFound")
    assert ("create", "Job", "archive") not in kube.calls and endpoint.accepted == 0


def test_a_workers_input_check_verdict_is_the_reason_and_message_of_the_batchs_failed_condition():
    fatal = "the input cannot be listed: bucket 'docs' does not exist on https://s3.example.com"
    failed = [{"type": "Failed", "status": "True", "reason": "FailedIndexes", "message": "Job has failed indexes"}]
    kube, batches = world(a_job("job-uid", controller_ref("OcrBatch", "batch-uid"), conditions=failed, failed=2))
    for index in (0, 1):
        message = {"index": index, "shards": 2, "fatal": fatal, "fatal_reason": "InputNotFound"}
        batches.runtime.store.apply_event("ADDED", a_pod(
            f"archive-{index}-w", index, "2026-12-03T11:00:00Z",
            {"terminated": {"exitCode": 78, "message": json.dumps(message)}}, controller_ref("Job", "job-uid")))
    reconcile(batches, batch(status=dict(STARTED), input=S3_INPUT))
    conditions = {c["type"]: c for c in kube.status["conditions"]}
    assert kube.status["phase"] == "Failed"
    assert (conditions["Failed"]["reason"], conditions["Ready"]["reason"]) == ("InputNotFound", "InputNotFound")
    assert conditions["Failed"]["message"] == f"Job has failed indexes: {fatal}"
