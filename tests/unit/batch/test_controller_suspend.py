"""spec.suspend on the OcrBatch controller (against an in-memory API): the Job's spec.suspend follows
the batch's, once per change, with a Normal event; a suspended batch is Suspended (Ready False)
and neither reads the Job's refusals nor says its workers are missing."""

from __future__ import annotations

from ocr_operator.ocrbatch import decide

from tests.unit.batch.test_controller import batch
from tests.unit.batch.test_controller_waiting import STARTED, job, ready, reconcile, world


def suspended_job(kube) -> bool | None:
    return kube.objects[("Job", "archive")]["spec"].get("suspend")


def test_suspending_a_running_batch_suspends_its_job_once_and_says_so():
    kube, batches = world(job(active=2, ready=2))
    result = reconcile(batches, batch(STARTED, suspend=True))
    assert ("patch", "Job", "archive") in kube.calls and suspended_job(kube) is True
    assert [e[:2] for e in result.events] == [("Normal", "Suspended")]
    assert kube.status["phase"] == decide.SUSPENDED
    cond = ready(kube)
    assert (cond["status"], cond["reason"]) == ("False", "Suspended")
    assert cond["message"].startswith("spec.suspend: 2 worker(s) stopping")
    kube.calls.clear()
    again = reconcile(batches, batch(kube.status, suspend=True))
    assert ("patch", "Job", "archive") not in kube.calls and again.events == []


def test_a_suspended_batch_without_pods_reads_no_refusal_and_waits_for_nothing():
    kube, batches = world({**job(), "spec": {**job()["spec"], "suspend": True}})
    result = reconcile(batches, batch(STARTED, suspend=True))
    assert not any(c[:2] in (("list", "Event"), ("patch", "Job")) for c in kube.calls)
    assert (kube.status["phase"], ready(kube)["reason"]) == (decide.SUSPENDED, "Suspended")
    assert ready(kube)["message"].startswith("spec.suspend: no worker running; 0 pages done")
    assert result.events == []


def test_resuming_unsuspends_the_job_and_the_batch_goes_back_to_its_workers():
    kube, batches = world({**job(), "spec": {**job()["spec"], "suspend": True}})
    result = reconcile(batches, batch({**STARTED, "phase": decide.SUSPENDED}, suspend=False))
    assert suspended_job(kube) is False
    assert [e[:2] for e in result.events] == [("Normal", "Resumed")]
    assert (kube.status["phase"], ready(kube)["reason"]) == ("Pending", "WorkersStarting")
