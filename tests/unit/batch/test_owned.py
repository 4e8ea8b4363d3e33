"""Which Job and which pods are a batch's (ocr_operator.ocrbatch.decide.batch_job, job_pods): by
name and controller owner uid, never by name or label alone. A decoy (someone else's Job of the
batch's name, a pod carrying the batch's label) is anyone's to create in the namespace."""

from __future__ import annotations

from ocr_operator.ocrbatch import decide, render

BATCH = {"metadata": {"name": "archive", "namespace": "team-a", "uid": "batch-uid"}}


def ref(kind: str, uid: str, controller: bool | None = True) -> dict:
    out = {"apiVersion": "v1", "kind": kind, "name": "archive", "uid": uid}
    if controller is not None:
        out["controller"] = controller
    return out


def job(*refs: dict, uid: str = "job-uid") -> dict:
    return {"kind": "Job", "metadata": {"name": "archive", "uid": uid, "ownerReferences": list(refs)}}


def pod(name: str, *refs: dict) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "labels": {render.LABEL_BATCH: "archive"},
                                        "ownerReferences": list(refs)}}


def test_a_job_listing_the_batch_as_an_owner_but_not_as_its_controller_is_not_the_batchs():
    assert decide.batch_job(job(ref("OcrBatch", "batch-uid")), BATCH) is not None
    assert decide.batch_job(job(ref("OcrBatch", "batch-uid", controller=None)), BATCH) is None
    assert decide.batch_job(job(ref("OcrBatch", "batch-uid", controller=False),
                                ref("Deployment", "someone-else")), BATCH) is None


def test_a_job_of_the_batchs_name_controlled_by_another_uid_is_not_the_batchs():
    assert decide.batch_job(job(ref("OcrBatch", "a-deleted-batch")), BATCH) is None
    assert decide.batch_job(job(), BATCH) is None and decide.batch_job(None, BATCH) is None


def test_only_pods_the_batchs_job_controls_are_its_workers_whatever_their_labels():
    mine = job(ref("OcrBatch", "batch-uid"))
    worker = pod("archive-0-a", ref("Job", "job-uid"))
    decoys = [pod("labelled-only"), pod("other-job", ref("Job", "other-job-uid")),
              pod("not-controller", ref("Job", "job-uid", controller=False)),
              pod("the-batch-itself", ref("OcrBatch", "batch-uid"))]
    assert decide.job_pods([*decoys, worker], mine) == [worker]


def test_no_pod_is_a_batchs_worker_while_the_batch_has_no_job():
    assert decide.job_pods([pod("archive-0-a", ref("Job", "job-uid"))], None) == []
