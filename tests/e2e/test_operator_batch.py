"""The OcrBatch controller on the kwok cluster (the operator as a local process; the workers' pods are
kwok's, so nothing is OCRed here: tests/e2e/test_realnode_batch.py runs a batch for real).

One batch walks through its life: held back while its OcrService does not exist, then while its
PVC does not exist (each time the Ready condition names the field and the object, and no Job is
created), started once both exist (an Indexed Job owned by the batch, its workers' ConfigMap),
waiting for its workers, which no node takes while their claim is unbound (the Ready condition
quotes the scheduler), then cancelled: the Job is deleted, the phase is Cancelled, an Event says so.
A batch whose workers the namespace's ResourceQuota refuses quotes the refusal, and goes on once the
quota has room. Another batch with a
callback is deleted while it runs: its receiver gets a signed batch.cancelled saying so.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from ocr_operator.ocrbatch import callback
from tests.e2e.callback_receiver import Receiver
from tests.e2e.operator_fixtures import ocrservice, operator_kubeconfig, print_operator_log

pytestmark = pytest.mark.e2e

BATCH = "archive"


def manifest(name: str = BATCH, **spec) -> dict:
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": name},
            "spec": {"service": "reader", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
                     "output": {"pvc": {"claimName": "docs", "path": "/out"}}, "parallelism": 2, **spec}}


def claim(cluster, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "docs"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))


def batch_operator(cluster, namespace: str, tmp_path) -> OperatorProcess:
    return OperatorProcess(operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log", extra_env={
        "OCR_OPERATOR_BATCH_IMAGE": "registry.invalid/causalflow/ocr-operator:1.0",
        "OCR_OPERATOR_BATCH_PREFLIGHT_SECONDS": "1",
        # The callback receiver is on this machine's loopback, which the egress guard refuses unless allowed.
        "OCR_OPERATOR_CALLBACK_ALLOW_CIDRS": "127.0.0.1/32"}).start()


def ready(ocr) -> dict | None:
    st = (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}
    return next((c for c in st.get("conditions", []) if c["type"] == "Ready"), None)


def test_a_batch_waits_for_its_service_and_claim_naming_them_then_runs_as_an_indexed_job_and_cancels(
        cluster, namespace, ocr, ocr_crd, tmp_path):
    op = batch_operator(cluster, namespace, tmp_path)
    try:
        ocr.apply(manifest())
        held = wait_for(lambda: (c := ready(ocr)) and c["reason"] == "ServiceNotFound" and c, timeout=30,
                        message="held back: no OcrService")
        assert held["status"] == "False" and "spec.service: OcrService reader does not exist" in held["message"]

        ocr.apply(ocrservice("reader"))
        held = wait_for(lambda: (c := ready(ocr)) and c["reason"] == "ClaimNotFound" and c, timeout=30,
                        message="held back: no PVC")
        assert "spec.input.pvc.claimName: PersistentVolumeClaim docs does not exist" in held["message"]
        assert ocr.list("job") == []
        assert ocr.get("ocrbatch", BATCH)["status"]["phase"] == "Pending"

        claim(cluster, namespace)
        job = wait_for(lambda: ocr.get("job", BATCH), timeout=30, message="the workers' Job")
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
        assert [o["kind"] for o in job["metadata"]["ownerReferences"]] == ["OcrBatch"]
        # The ConfigMap and the Job are applied at once (the workers wait for the mount): either may come first.
        cm = wait_for(lambda: ocr.get("configmap", f"{BATCH}-batch"), timeout=15, message="the workers' ConfigMap")
        config = json.loads(cm["data"]["config.json"])
        svc = ocr.get("service", "reader")
        assert config["serviceUrl"] == f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
        # The claim is never bound (this cluster provisions no volumes): the batch says its workers wait for it.
        waiting = wait_for(lambda: (c := ready(ocr)) and c["reason"] == "WorkersUnschedulable" and c, timeout=30,
                           message="Ready naming the workers no node takes")
        assert waiting["status"] == "False", waiting
        assert "unbound immediate PersistentVolumeClaims" in waiting["message"], waiting
        assert ocr.get("ocrbatch", BATCH)["status"]["phase"] == "Pending"

        ocr.patch("ocrbatch", BATCH, {"spec": {"cancel": True}})
        st = wait_for(lambda: (s := (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}).get("phase")
                      == "Cancelled" and s, timeout=30, message="phase Cancelled")
        assert next(c for c in st["conditions"] if c["type"] == "Cancelled")["status"] == "True"
        wait_for(lambda: ocr.get("job", BATCH) is None or ocr.get("job", BATCH)["metadata"].get("deletionTimestamp"),
                 timeout=30, message="the Job deleted")
        # Events are posted off the reconcile path (queued, rate-limited): they may follow the status.
        def reasons() -> set[str]:
            return {e["reason"] for e in ocr.list("events") if e["involvedObject"].get("kind") == "OcrBatch"}

        wait_for(lambda: {"Started", "Cancelled"} <= reasons(), timeout=15, message="the Started and Cancelled events")
    except BaseException:  # in the body the session has not counted this failure yet: print it here
        print_operator_log(op)
        raise
    finally:
        op.stop()


def test_a_running_batch_deleted_sends_a_signed_batch_cancelled_callback_saying_so(cluster, namespace, ocr, ocr_crd,
                                                                                    tmp_path):
    key = b"deleted-batch-hmac-key-of-32-bytes-01"  # at least 32 bytes, or the batch is held
    cluster.kubectl("create", "secret", "generic", "hook", "-n", namespace, f"--from-literal=secret={key.decode()}")
    receiver = Receiver()  # answers 500 first: the callback of a deleted batch is retried too
    op = batch_operator(cluster, namespace, tmp_path)
    try:
        ocr.apply(ocrservice("reader"))
        claim(cluster, namespace)
        ocr.apply(manifest("doomed", callback={"url": receiver.url, "secretRef": {"name": "hook"}}))
        wait_for(lambda: ocr.get("job", "doomed"), timeout=30, message="the workers' Job")
        uid = ocr.get("ocrbatch", "doomed")["metadata"]["uid"]
        cluster.kubectl("delete", "ocrbatch", "doomed", "-n", namespace, "--wait=false")
        wait_for(lambda: len(receiver.requests) >= 2, timeout=60, message="the callback, answered 500 then 200")
        headers, body = receiver.requests[-1]
        doc = json.loads(body)
        assert headers[callback.EVENT_HEADER] == doc["type"] == "batch.cancelled"
        assert callback.verify(key, headers[callback.SIGNATURE_HEADER], body)
        assert doc["id"] == f"{uid}:batch.cancelled" and doc["phase"] == "Cancelled" and "deleted" in doc["message"]
        assert receiver.requests[0][1] == body or json.loads(receiver.requests[0][1])["id"] == doc["id"]
        time.sleep(2)
        assert len(receiver.requests) == 2  # delivered once: no further POST
    except BaseException:  # in the body the session has not counted this failure yet: print it here
        print_operator_log(op)
        raise
    finally:
        op.stop()
        receiver.close()


def test_a_batch_whose_workers_the_namespaces_quota_refuses_quotes_the_quota_and_goes_on_once_it_has_room(
        cluster, namespace, ocr, ocr_crd, tmp_path):
    """A ResourceQuota of no pods: the Job exists, the API server refuses every worker (only an Event
    on the Job says so), and the batch's Ready condition quotes the refusal instead of waiting silently;
    raised, the same batch creates its workers and stops quoting it."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "batch-pods"},
             "spec": {"hard": {"pods": "0"}}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(quota))
    wait_for(lambda: (cluster.require_object("resourcequota", "batch-pods", namespace).get("status") or {}).get("hard"),
             timeout=30, message="the quota controller to take the quota up")
    op = batch_operator(cluster, namespace, tmp_path)
    try:
        ocr.apply(ocrservice("reader"))
        claim(cluster, namespace)
        ocr.apply(manifest())
        held = wait_for(lambda: (c := ready(ocr)) and c["reason"] == "WorkersNotCreated" and c, timeout=60,
                        message="Ready naming the refused workers")
        assert held["status"] == "False" and "exceeded quota: batch-pods" in held["message"], held
        assert ocr.get("ocrbatch", BATCH)["status"]["phase"] == "Pending"
        assert ocr.get("job", BATCH)["status"].get("active", 0) == 0
        wide = cluster.kubectl("get", "ocrbatch", BATCH, "-n", namespace, "-o", "wide").stdout
        assert "REASON" in wide and "WorkersNotCreated" in wide, wide  # kubectl's printer column
        wait_for(lambda: any(e["reason"] == "WorkersNotCreated" and e["type"] == "Warning" for e in ocr.list("events")
                             if e["involvedObject"].get("kind") == "OcrBatch"),
                 timeout=15, message="the WorkersNotCreated event")

        # The quota raised: the same batch goes on. The Job controller retries the refused creates
        # (with backoff, a minute at most), the workers exist, and the batch quotes the refusal no
        # more: it now waits for its never-bound claim, as any batch here does.
        quota["spec"]["hard"]["pods"] = "10"
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(quota))
        moved = wait_for(lambda: (c := ready(ocr)) and c["reason"] != "WorkersNotCreated" and c, timeout=120,
                         message="Ready past the refusal once the quota has room")
        assert moved["reason"] == "WorkersUnschedulable" and "exceeded quota" not in moved["message"], moved
        assert len(ocr.list("pod", f"job-name={BATCH}")) == 2
    except BaseException:  # in the body the session has not counted this failure yet: print it here
        print_operator_log(op)
        raise
    finally:
        op.stop()
