"""The API server itself rejects invalid OcrBatches, with a message naming the field.

No operator runs here: these are the OcrBatch CRD's schema, bounds and CEL rules (transition rules
included) at work on a real kube-apiserver.
"""

from __future__ import annotations

import copy
import uuid

import pytest
import yaml

from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

PVC_IN = {"pvc": {"claimName": "docs", "path": "/in"}}
PVC_OUT = {"pvc": {"claimName": "docs", "path": "/out"}}
S3 = {"url": "s3://bucket/in/", "credentialsSecret": "s3-creds"}


def batch(name: str, **spec) -> dict:
    body = {"service": "invoices", "input": PVC_IN, "output": PVC_OUT, **spec}
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": name},
            "spec": copy.deepcopy(body)}


INVALID = [
    ("input from S3 and a PVC at once", {"input": {**PVC_IN, "s3": S3}}, "spec.input needs exactly one"),
    ("no input location", {"input": {}}, "spec.input needs exactly one"),
    ("output inside the input", {"output": {"pvc": {"claimName": "docs", "path": "/in/results"}}},
     "spec.output.pvc.path and spec.input.pvc.path must not contain one another"),
    ("output on the volume whose whole is the input", {"input": {"pvc": {"claimName": "docs"}}},
     "spec.output.pvc.path and spec.input.pvc.path must not contain one another"),
    ("input inside the output", {"output": {"pvc": {"claimName": "docs", "path": "/"}}},
     "spec.output.pvc.path and spec.input.pvc.path must not contain one another"),
    ("S3 output inside the S3 input", {"input": {"s3": S3}, "output": {"s3": {**S3, "url": "s3://bucket/in/out"}}},
     "spec.output.s3.url and spec.input.s3.url must not contain one another"),
    ("a path with ..", {"input": {"pvc": {"claimName": "docs", "path": "/in/../etc"}}}, "spec.input.pvc.path"),
    ("not an s3 URL", {"input": {"s3": {**S3, "url": "https://bucket/in"}}}, "spec.input.s3.url"),
    ("S3 without credentials", {"input": {"s3": {"url": "s3://bucket/in/"}}}, "spec.input.s3.credentialsSecret"),
    ("mode and prompt", {"options": {"mode": "free", "prompt": "Parse the figure."}},
     "spec.options.mode and spec.options.prompt are mutually exclusive"),
    ("an unknown mode", {"options": {"mode": "fast"}}, "spec.options.mode"),
    ("a token budget past the model's context", {"options": {"maxNewTokens": 9000}}, "spec.options.maxNewTokens"),
    ("too many workers", {"parallelism": 65}, "spec.parallelism"),
    ("a deadline under a minute", {"deadlineSeconds": 10}, "spec.deadlineSeconds"),
    ("documents larger than 1 GiB", {"limits": {"maxDocumentBytes": 2 * 1024**3}}, "spec.limits.maxDocumentBytes"),
    ("a callback that is not http(s)", {"callback": {"url": "ftp://hooks.example.com/x"}}, "spec.callback.url"),
    ("a service name that is not a DNS label", {"service": "Invoices_1"}, "spec.service"),
    ("unknown field", {"paralelism": 2}, 'unknown field "spec.paralelism"'),
]


@pytest.fixture(scope="module")
def batch_ns(cluster, ocr_crd):
    wait_for(lambda: cluster.kubectl("get", "ocrbatches", "-A", check=False).returncode == 0, timeout=60,
             message="ocrbatches served")
    name = f"t-ocrbatch-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def apply(cluster, ns: str, manifest: dict, check: bool = True):
    return cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(manifest), check=check)


@pytest.mark.parametrize("what, spec, field", INVALID, ids=[i[0].replace(" ", "-") for i in INVALID])
def test_the_api_server_rejects_an_invalid_ocrbatch_naming_the_field(cluster, batch_ns, what, spec, field):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    proc = apply(cluster, batch_ns, batch(name, **spec), check=False)
    assert proc.returncode != 0, f"{what}: accepted, but should be rejected"
    assert field in proc.stderr, f"{what}: message does not name {field!r}: {proc.stderr}"


def test_a_name_too_long_for_its_job_is_rejected(cluster, batch_ns):
    proc = apply(cluster, batch_ns, batch("b" * 53), check=False)
    assert proc.returncode != 0 and "metadata.name of an OcrBatch is at most 52 characters" in proc.stderr


def test_a_valid_ocrbatch_is_accepted_defaulted_and_listed_with_its_columns(cluster, batch_ns):
    apply(cluster, batch_ns, batch("good", input={"pvc": {"claimName": "docs"}}, output={"s3": S3}))
    spec = yaml.safe_load(cluster.kubectl("get", "ocrbatch", "good", "-n", batch_ns, "-o", "yaml").stdout)["spec"]
    assert (spec["parallelism"], spec["concurrencyPerWorker"], spec["cancel"]) == (1, 4, False)
    assert spec["input"]["pvc"]["path"] == "/"
    assert spec["limits"] == {"maxDocumentBytes": 104857600, "maxPagesPerDocument": 1000, "maxDocuments": 100000,
                              "storageRetrySeconds": 600}
    assert spec["stallSeconds"] == 600
    header = cluster.kubectl("get", "ocrb", "-n", batch_ns).stdout.splitlines()[0].split()
    assert header == ["NAME", "SERVICE", "PHASE", "PAGES", "FAILED", "AGE"]


def test_what_a_batch_reads_and_writes_cannot_change_after_it_is_created(cluster, batch_ns):
    apply(cluster, batch_ns, batch("fixed"))
    proc = apply(cluster, batch_ns, batch("fixed", output={"pvc": {"claimName": "docs", "path": "/elsewhere"}}),
                 check=False)
    assert proc.returncode != 0 and "spec.service, spec.input, spec.output and spec.options are immutable" in proc.stderr


@pytest.mark.parametrize("change", [{"parallelism": 4}, {"concurrencyPerWorker": 8}, {"deadlineSeconds": 60},
                                    {"limits": {"maxDocuments": 10}}], ids=lambda c: next(iter(c)))
def test_how_a_batch_runs_cannot_change_after_it_is_created_since_its_job_and_shards_are_made_once(
        cluster, batch_ns, change):
    name = f"runs-{next(iter(change)).lower()}"
    apply(cluster, batch_ns, batch(name))
    proc = apply(cluster, batch_ns, batch(name, **change), check=False)
    assert proc.returncode != 0 and "spec.parallelism, spec.concurrencyPerWorker, spec.deadlineSeconds and spec.limits are fixed" in proc.stderr
    apply(cluster, batch_ns, batch(name, cancel=True))  # cancelling is still a change it takes


def test_a_cancelled_batch_cannot_be_uncancelled(cluster, batch_ns):
    apply(cluster, batch_ns, batch("stop", cancel=True))
    proc = apply(cluster, batch_ns, batch("stop", cancel=False), check=False)
    assert proc.returncode != 0 and "spec.cancel cannot be undone" in proc.stderr
