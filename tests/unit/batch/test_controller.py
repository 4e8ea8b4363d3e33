"""The OcrBatch controller on the runtime (ocr_operator.ocrbatch.controller), against an in-memory API:
the preflight holds a batch back, a batch that may start gets its ConfigMap and Job through the
runtime's apply, a name someone else holds is a conflict, a cancel deletes the Job, and the
completion callback is a runtime job whose outcome the next reconcile records once."""

from __future__ import annotations

import asyncio
import datetime as dt

from ocr_operator import labels, wiring
from ocr_operator.ocrbatch import callback, controller as batch_controller, render
from ocr_operator.runtime.controller import Context, Runtime
from ocr_operator.runtime.jobs import Jobs

from tests.unit.operator.helpers import ClusterKube

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc)
SETTINGS = render.WorkerSettings(image="registry.example/ocr-operator:1", progress_interval=5)
NS = "team-a"
KEY = (NS, "archive")


def batch(status: dict | None = None, **spec_over) -> dict:
    spec = {"service": "invoices", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
            "output": {"pvc": {"claimName": "results", "path": "/"}}, "parallelism": 2, **spec_over}
    body = {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch",
            "metadata": {"name": "archive", "namespace": NS, "uid": "batch-uid", "generation": 1}, "spec": spec}
    if status is not None:
        body["status"] = status
    return body


def ocrservice() -> dict:
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
            "metadata": {"name": "invoices", "namespace": NS, "uid": "svc-uid"}, "spec": {"image": "x"}}


def service() -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "invoices", "namespace": NS, "uid": "s", "labels": {labels.LABEL_MANAGED_BY:
                                                                                     labels.FIELD_MANAGER}},
            "spec": {"clusterIP": "10.96.0.7", "ports": [{"port": 8080}]}}


def claim(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS}}


def world(*extra: dict, with_service: bool = True) -> tuple[ClusterKube, batch_controller.OcrBatches]:
    """The API with the batch's claims (and the OcrService's Service), a cache primed as the
    runtime primes it, and the OcrBatch reconciler on a runtime beside an OcrService controller
    that holds the OcrService `invoices`."""
    objects = {("PersistentVolumeClaim", "docs"): claim("docs"), ("PersistentVolumeClaim", "results"): claim("results")}
    if with_service:
        objects[("Service", "invoices")] = service()
    for obj in extra:
        objects[(obj["kind"], obj["metadata"]["name"])] = obj
    kube = ClusterKube(objects)
    store = wiring.store()
    for kind in wiring.WATCHED:
        store.mark_listed(kind.kind, NS, asyncio.run(kube.list(kind.kind, NS, None if kind.owned
                                                               else labels.MANAGED_SELECTOR)))
    kube.calls.clear()
    runtime = Runtime(kube, store)
    services = wiring.service_controller.controller(runtime)
    if with_service:
        services.cache[(NS, "invoices")] = ocrservice()
    return kube, batch_controller.OcrBatches(runtime, services, settings=SETTINGS)


def reconcile(batches: batch_controller.OcrBatches, body: dict, jobs: Jobs | None = None):
    return asyncio.run(batches.reconcile(body, Context(now=NOW, jobs=jobs)))


def test_a_batch_whose_ocrservice_is_missing_is_held_pending_and_looked_at_again():
    kube, batches = world(with_service=False)
    result = reconcile(batches, batch())
    assert kube.status["phase"] == "Pending"
    ready = kube.status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "ServiceNotFound")
    assert result.requeue_after == batch_controller.PREFLIGHT_RETRY_SECONDS
    assert [c[0] for c in kube.calls if c[0] != "get"] == ["patch"]  # one status write, nothing created


def test_a_batch_that_may_start_gets_its_configmap_and_job_and_says_so():
    kube, batches = world()
    result = reconcile(batches, batch())
    assert ("apply", "ConfigMap", "archive-batch") in kube.calls and ("create", "Job", "archive") in kube.calls
    assert not [c for c in kube.calls if c[0] == "get" and c[1] in ("Job", "ConfigMap", "Service", "OcrService")]
    job = kube.objects[("Job", "archive")]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "batch-uid"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "-m", "ocr_batch_worker"]
    assert (kube.status["phase"], kube.status["jobName"]) == ("Pending", "archive")
    assert [e[1] for e in result.events] == ["Started"] and result.requeue_after == batches.progress_seconds


def test_a_job_name_taken_by_someone_elses_job_holds_the_batch_with_a_job_conflict():
    theirs = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "archive", "namespace": NS, "uid": "t"}}
    kube, batches = world(theirs)
    reconcile(batches, batch())
    assert kube.status["conditions"][0]["reason"] == "JobConflict"
    assert kube.objects[("Job", "archive")] == theirs


def test_a_configmap_name_taken_by_someone_elses_configmap_creates_nothing_and_says_so():
    theirs = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "archive-batch", "namespace": NS,
                                                                     "uid": "t"}, "data": {"mine": "yes"}}
    kube, batches = world(theirs)
    reconcile(batches, batch())
    assert kube.status["conditions"][0]["reason"] == "ConfigMapConflict"
    assert kube.objects[("ConfigMap", "archive-batch")] == theirs
    assert ("apply", "ConfigMap", "archive-batch") not in kube.calls


def test_a_cancelled_batch_deletes_its_job_and_ends_cancelled():
    kube, batches = world()
    reconcile(batches, batch())
    started = {**batch(cancel=True), "status": kube.status}
    batches.runtime.store.apply_event("ADDED", {**kube.objects[("Job", "archive")], "kind": "Job"})
    result = reconcile(batches, started)
    assert ("delete", "Job", "archive") in kube.calls and ("Job", "archive") not in kube.objects
    assert kube.status["phase"] == "Cancelled" and [e[1] for e in result.events] == ["Cancelled"]


def test_an_ended_batchs_callback_runs_as_a_job_and_is_recorded_once_by_the_next_reconcile(monkeypatch):
    sent = []

    async def deliver(url, payload, key):
        sent.append((url, payload["type"]))
        return callback.Outcome("Delivered", 1, 200, None)

    monkeypatch.setattr(callback, "deliver", deliver)
    kube, batches = world()
    ended = batch(status={"phase": "Succeeded", "jobName": "archive"}, callback={"url": "https://hooks.example/ocr"})

    async def go():
        jobs = Jobs(lambda key: None)
        first = await batches.reconcile(ended, Context(now=NOW, jobs=jobs))
        await asyncio.sleep(0.05)  # the delivery job runs beside the reconciles
        second = await batches.reconcile(ended, Context(now=NOW, jobs=jobs))
        recorded = {**ended, "status": kube.status}
        third = await batches.reconcile(recorded, Context(now=NOW, jobs=jobs))
        await asyncio.sleep(0.05)
        return first, second, third, jobs

    first, second, third, jobs = asyncio.run(go())
    assert first.writes == 0 and sent == [("https://hooks.example/ocr", "batch.completed")]
    assert kube.status["callback"]["state"] == "Delivered" and kube.status["callback"]["event"] == "batch.completed"
    assert [e[1] for e in second.events] == ["CallbackDelivered"]
    assert third.writes == 0 and third.events == [] and len(sent) == 1 and jobs.result(KEY) is None
