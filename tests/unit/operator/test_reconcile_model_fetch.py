"""A reconcile of an OcrService whose weights come from S3, with its pods in the watch-fed cache:
the fetching pod's progress costs one pods/log read per reconcile and wakes the reconcile again
while it fetches; a failed fetch rolls the revision back with its named reason."""

from __future__ import annotations

import json

from ocr_operator.ocrservice import naming

from .helpers import owner, reconcile
from .test_reconcile_decoy_pods import NOW, RV, merged, reconciled, ref, replicaset, run
from .test_reconcile_requests import RecordingKube, listed_store

S3 = {"source": {"s3": {"url": "s3://models/ocr/v1/", "credentialsSecret": "store"}}}
LINE = {"event": "progress", "percent": 42.5, "bytes": 2_900_000_000, "total_bytes": 6_800_000_000, "files": 3,
        "total_files": 7, "mb_per_s": 180.0}


class LogKube(RecordingKube):
    """RecordingKube that also serves pods/log (the fetcher's last line)."""

    async def read_log(self, namespace, pod, *, tail_lines, limit_bytes, container=None):
        self.calls.append(("log", f"{pod}/{container}/{tail_lines}"))
        return json.dumps(LINE) + "\n"


def upgraded(kube, store) -> tuple[dict, str]:
    """v1 settled, then the model's URL changed: (the OcrService, the new revision)."""
    body = owner({"replicas": 1, "model": {"source": S3["source"]}})
    run(reconcile(kube, body, now=NOW, store=store))
    good, digest = kube.status["currentRevision"], kube.status["rollout"]["currentDigest"]
    source = {"s3": {**S3["source"]["s3"], "url": "s3://models/ocr/v2/"}}
    body = owner({"replicas": 1, "model": {"source": source}}, generation=2,
                 status={"rollout": {"phase": "Healthy", "currentRevision": good, "lastGoodRevision": good,
                                     "currentDigest": digest, "lastGoodDigest": digest}})
    result = run(reconcile(kube, body, now=NOW, store=store))
    body = merged(body, result.status["status"])
    return body, body["status"]["rollout"]["currentRevision"]


def fetch_pod(store, revision: str, init_status: dict) -> str:
    deployment_uid = store.objects[("Deployment", "team-a", "ocr")]["metadata"]["uid"]
    replicaset(store, "ocr-5d8f", "rs-uid", deployment_uid)
    name = f"ocr-{next(RV)}"
    store.apply_event("ADDED", {"kind": "Pod", "metadata": {
        "name": name, "namespace": "team-a", "resourceVersion": f"rv-{next(RV)}",
        "creationTimestamp": "2026-03-01T12:00:00Z", "ownerReferences": [ref("ReplicaSet", "ocr-5d8f", "rs-uid")],
        "labels": {**naming.labels("ocr"), naming.REVISION_KEY: revision}},
        "status": {"phase": "Pending", "initContainerStatuses": [{"name": "model-fetch", **init_status}]}})
    return name


def test_a_fetching_pod_costs_one_log_read_per_reconcile_and_shows_its_percentage():
    kube, store = LogKube(), listed_store()
    body, new = upgraded(kube, store)
    pod = fetch_pod(store, new, {"state": {"running": {"startedAt": "2026-03-01T12:00:01Z"}}})
    kube.calls.clear()
    result = run(reconcile(kube, body, now=NOW, store=store))
    assert [c for c in kube.calls if c[0] == "log"] == [("log", f"{pod}/model-fetch/1")]
    assert result.requeue_after is not None and result.requeue_after <= 10
    cond = next(c for c in result.status["status"]["conditions"] if c["type"] == "ModelFetching")
    assert cond["status"] == "True" and f"pod {pod}: 42.5%" in cond["message"]
    assert result.status["status"]["modelFetch"]["percent"] == 42.5


def test_a_checksum_mismatch_rolls_the_revision_back_and_reads_no_log():
    kube, store = LogKube(), listed_store()
    body, new = upgraded(kube, store)
    fetch_pod(store, new, {"state": {"terminated": {"exitCode": 1, "message": "ChecksumMismatch: model.safetensors "
                                                    "from s3://models/ocr/v2/model.safetensors has sha256 ab, "
                                                    "spec.model.checksums expects cd"}}})
    kube.calls.clear()
    body, events = reconciled(kube, store, body, 2)
    assert "RolledBack" in events and body["status"]["failedReason"] == "ChecksumMismatch"
    assert "model.safetensors" in body["status"]["failedMessage"]
    assert not [c for c in kube.calls if c[0] == "log"]
