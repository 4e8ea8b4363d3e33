"""Decoys never steer an OcrBatch (ocr_operator.ocrbatch.controller): a Job of the batch's name the
batch does not control, or a pod carrying the batch's label that the batch's Job does not control,
is not read as the batch's. Their logs and termination messages never feed the progress, and a
decoy Job neither ends the batch nor blocks its cancel: it only holds a batch that wants to start
(JobConflict)."""

from __future__ import annotations

import json

from ocr_operator import labels
from ocr_operator.ocrbatch import render

from tests.unit.batch.test_controller import NS, batch, reconcile, world

MANAGED = {labels.LABEL_MANAGED_BY: labels.FIELD_MANAGER, render.LABEL_BATCH: "archive"}
STARTED = {"phase": "Running", "jobName": "archive", "startTime": "2026-12-03T11:00:00Z"}


def controller_ref(kind: str, uid: str, controller: bool = True) -> dict:
    return {"apiVersion": "v1", "kind": kind, "name": "archive", "uid": uid, "controller": controller}


def a_job(uid: str, *refs: dict, **status) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job", "status": status,
            "metadata": {"name": "archive", "namespace": NS, "uid": uid, "labels": dict(MANAGED),
                         "ownerReferences": list(refs)}}


def our_job() -> dict:
    return a_job("job-uid", controller_ref("OcrBatch", "batch-uid"), active=2)


def a_pod(name: str, index: int, created: str, state: dict, *refs: dict) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "status": {"containerStatuses": [{"name": "worker", "state": state}]},
            "metadata": {"name": name, "namespace": NS, "uid": f"{name}-uid", "creationTimestamp": created,
                         "resourceVersion": "1", "ownerReferences": list(refs),
                         "labels": {**MANAGED, "batch.kubernetes.io/job-completion-index": str(index)}}}


def report(index: int, pages_done: int, **extra) -> dict:
    return {"index": index, "documents_total": 1, "pages_total": pages_done, "pages_done": pages_done, **extra}


def test_a_decoy_pods_log_and_termination_message_never_feed_the_batchs_progress():
    kube, batches = world(our_job())
    logs = {"archive-0-w": json.dumps({"progress": report(0, 3)}),
            "decoy-0": json.dumps({"progress": report(0, 777)})}
    read: list[str] = []

    async def read_log(ns, name, *, tail_lines=None, limit_bytes=None):
        read.append(name)
        return logs[name]

    kube.read_log = read_log
    pods = [a_pod("archive-0-w", 0, "2026-12-03T11:00:00Z", {"running": {}}, controller_ref("Job", "job-uid")),
            # newer than the worker of index 0, labelled as the batch's, controlled by nothing
            a_pod("decoy-0", 0, "2026-12-03T11:30:00Z", {"running": {}}),
            # a finished "worker" of index 1 controlled by another Job
            a_pod("decoy-1", 1, "2026-12-03T11:30:00Z",
                  {"terminated": {"exitCode": 0, "message": json.dumps(report(1, 999, finished=True))}},
                  controller_ref("Job", "someone-elses-job"))]
    for pod in pods:
        batches.runtime.store.apply_event("ADDED", pod)
    reconcile(batches, batch(status=dict(STARTED)))
    assert read == ["archive-0-w"]
    assert kube.status["pages"] == {"total": 3, "done": 3, "failed": 0}


def test_a_decoy_job_of_the_batchs_name_marked_complete_does_not_end_the_batch():
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 2}
    decoy = a_job("decoy-uid", controller_ref("OcrBatch", "batch-uid", controller=False), **complete)
    kube, batches = world(decoy)
    reconcile(batches, batch(status=dict(STARTED)))
    assert kube.status["phase"] == "Pending"
    assert kube.status["conditions"][0]["reason"] == "JobConflict"
    assert kube.objects[("Job", "archive")] == decoy


def test_cancelling_a_batch_whose_job_name_a_decoy_holds_ends_it_and_leaves_the_decoy_alone():
    decoy = a_job("decoy-uid", controller_ref("OcrBatch", "a-deleted-batch"), active=1)
    kube, batches = world(decoy)
    result = reconcile(batches, batch(cancel=True))
    assert kube.status["phase"] == "Cancelled" and [e[1] for e in result.events] == ["Cancelled"]
    assert ("delete", "Job", "archive") not in kube.calls and kube.objects[("Job", "archive")] == decoy


def someone_elses_configmap() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.json": '{"server": "http://elsewhere"}'},
            "metadata": {"name": "archive-batch", "namespace": NS, "uid": "theirs"}}


def test_a_configmap_name_someone_else_holds_starts_no_workers_that_would_mount_it():
    kube, batches = world(someone_elses_configmap())
    reconcile(batches, batch())
    assert kube.status["conditions"][0]["reason"] == "ConfigMapConflict"
    assert ("create", "Job", "archive") not in kube.calls and ("Job", "archive") not in kube.objects


def test_a_configmap_the_cache_has_not_seen_is_looked_up_and_never_applied_over():
    kube, batches = world(someone_elses_configmap())
    store = batches.runtime.store
    store.objects.pop(("ConfigMap", NS, "archive-batch"), None)  # a namespace the cache could not list
    store.listed.discard(("ConfigMap", NS))
    reconcile(batches, batch())
    assert kube.objects[("ConfigMap", "archive-batch")] == someone_elses_configmap()
    assert kube.status["conditions"][0]["reason"] == "ConfigMapConflict"
    assert ("get", "ConfigMap", "archive-batch") in kube.calls and ("apply", "ConfigMap", "archive-batch") not in kube.calls
