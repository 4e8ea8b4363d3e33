"""The OcrBatch controller says why its workers are missing (controller._read_refusal, against an
in-memory API): the Job's FailedCreate Events, listed by the Job's uid only while the Job lacks
pods, make the batch Pending with Ready False quoting the refusal and one Warning event; a pod
created since ends it."""

from __future__ import annotations

import asyncio

from ocr_operator.ocrbatch import controller as batch_controller, render, waiting
from ocr_operator.runtime.controller import Context, Runtime
from ocr_operator import wiring

from tests.unit.batch.test_controller import NOW, NS, SETTINGS, batch, ocrservice, service, claim
from tests.unit.operator.helpers import ClusterKube

QUOTA = ('Error creating: pods "archive-0-x7k2p" is forbidden: exceeded quota: batch-pods, requested: pods=1, '
         'used: pods=0, limited: pods=0')
STARTED = {"phase": "Pending", "jobName": "archive", "startTime": "2026-12-03T11:59:00Z"}


def job(**status) -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "archive", "namespace": NS, "uid": "job-uid", "labels": render.labels("archive"),
                         "ownerReferences": [render.owner_reference(batch())]},
            "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed"}, "status": status}


def event(name: str, reason: str, at: str, message: str = "", uid: str = "job-uid") -> dict:
    return {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name, "namespace": NS},
            "involvedObject": {"kind": "Job", "name": "archive", "uid": uid}, "reason": reason,
            "lastTimestamp": at, "message": message}


def world(*objects: dict) -> tuple[ClusterKube, batch_controller.OcrBatches]:
    kube = ClusterKube({(o["kind"], o["metadata"]["name"]): o
                        for o in (claim("docs"), claim("results"), service(), *objects)})
    store = wiring.store()
    for kind in wiring.WATCHED:
        store.mark_listed(kind.kind, NS, asyncio.run(kube.list(kind.kind, NS)))
    kube.calls.clear()
    runtime = Runtime(kube, store)
    services = wiring.service_controller.controller(runtime)
    services.cache[(NS, "invoices")] = ocrservice()
    return kube, batch_controller.OcrBatches(runtime, services, settings=SETTINGS)


def reconcile(batches, body):
    return asyncio.run(batches.reconcile(body, Context(now=NOW)))


def ready(kube: ClusterKube) -> dict:
    return next(c for c in kube.status["conditions"] if c["type"] == "Ready")


def test_a_job_refused_its_pods_makes_the_batch_pending_quoting_the_refusal_with_one_warning():
    kube, batches = world(job(), event("a.1", "FailedCreate", "2026-12-03T11:59:30Z", QUOTA),
                          event("other", "FailedCreate", "2026-12-03T11:59:40Z", "not ours", uid="other-uid"))
    result = reconcile(batches, batch(STARTED))
    assert ("list", "Event", "involvedObject.uid=job-uid") in kube.calls
    assert kube.status["phase"] == "Pending"
    cond = ready(kube)
    assert (cond["status"], cond["reason"]) == ("False", waiting.NOT_CREATED)
    assert cond["message"] == f"the Job cannot create the workers' pods: {QUOTA}"
    assert result.events == [("Warning", waiting.NOT_CREATED, cond["message"])]
    again = reconcile(batches, batch(kube.status))
    assert again.events == []  # said once while it lasts


def test_a_pod_created_since_the_refusal_ends_the_wait():
    kube, batches = world(job(active=2, ready=2), event("a.1", "FailedCreate", "2026-12-03T11:59:30Z", QUOTA),
                          event("a.2", "SuccessfulCreate", "2026-12-03T11:59:50Z", "Created pod: archive-0-x"))
    reconcile(batches, batch(STARTED))
    assert not any(c[:2] == ("list", "Event") for c in kube.calls)  # the Job has its pods: no Events read
    assert kube.status["phase"] == "Running"
    assert (ready(kube)["status"], ready(kube)["reason"]) == ("True", "Running")


def test_a_job_short_of_pods_without_a_refusal_is_starting():
    kube, batches = world(job(), event("a.2", "SuccessfulCreate", "2026-12-03T11:59:50Z", "Created pod: archive-0-x"))
    result = reconcile(batches, batch(STARTED))
    assert ("list", "Event", "involvedObject.uid=job-uid") in kube.calls
    assert (ready(kube)["reason"], kube.status["phase"]) == ("WorkersStarting", "Pending")
    assert result.events == []
