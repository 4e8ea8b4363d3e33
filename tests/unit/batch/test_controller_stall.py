"""The OcrBatch controller's stall rule on the runtime (controller._read_logs and _stalls, against an
in-memory API): a running worker whose progress lines stop moving for spec.stallSeconds has its pod
deleted with a Stalled condition and a Warning event naming the index and the pod; a new pod that
moves turns the condition False; a deleted pod whose node never confirms is marked Failed."""

from __future__ import annotations

import asyncio
import itertools
import json

from ocr_operator.ocrbatch import controller as batch_controller, render
from ocr_operator.runtime.controller import Context, Runtime
from ocr_operator.runtime.kube import ApiError
from ocr_operator import wiring

from tests.unit.batch.test_controller import NOW, NS, SETTINGS, batch, ocrservice, service, claim
from tests.unit.operator.helpers import ClusterKube

STALL = 60
RV = itertools.count(1)  # each pod event a new resourceVersion (the cache keeps a pod per version)
RUNNING_STATUS = {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]}


class LogKube(ClusterKube):
    """ClusterKube with pod logs (None: the kubelet does not answer) and pod status patches kept apart."""

    def __init__(self, objects):
        super().__init__(objects)
        self.logs: dict[str, str | None] = {}
        self.pod_patches: list[tuple[str, dict]] = []

    async def read_log(self, namespace, pod, *, tail_lines, limit_bytes):
        text = self.logs.get(pod)
        if text is None:
            raise ApiError(500, "InternalError", "dial tcp 10.0.0.9:10250: i/o timeout")
        return text

    async def merge_patch(self, kind, namespace, name, patch, *, subresource=None):
        if kind == "Pod":
            self.pod_patches.append((name, patch))
            return {}
        return await super().merge_patch(kind, namespace, name, patch, subresource=subresource)


def progress(pages_done: int) -> str:
    report = {"index": 0, "shards": 1, "pages_done": pages_done, "documents_total": 3}
    return "INFO index 0 of 1\n" + '{"progress": ' + json.dumps(report) + "}\n"


def job() -> dict:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "archive", "namespace": NS, "uid": "job-uid", "labels": render.labels("archive"),
                         "ownerReferences": [render.owner_reference(batch())]},
            "status": {"active": 1}}


def pod(name: str, uid: str, *, created: str = "2026-12-03T12:00:00Z", deleting: bool = False) -> dict:
    md = {"name": name, "namespace": NS, "uid": uid, "creationTimestamp": created, "resourceVersion": str(next(RV)),
          "labels": {**render.labels("archive"), "batch.kubernetes.io/job-completion-index": "0"},
          "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "archive", "uid": "job-uid",
                               "controller": True}]}
    if deleting:
        md["deletionTimestamp"] = "2026-12-03T12:05:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "status": RUNNING_STATUS}


class World:
    def __init__(self) -> None:
        objects = {("PersistentVolumeClaim", n): claim(n) for n in ("docs", "results")}
        objects[("Service", "invoices")] = service()
        objects[("Job", "archive")] = job()
        self.kube = LogKube(objects)
        self.store = wiring.store()
        for kind in wiring.WATCHED:
            self.store.mark_listed(kind.kind, NS, [])
        self.store.apply_event("ADDED", job())
        runtime = Runtime(self.kube, self.store)
        services = wiring.service_controller.controller(runtime)
        services.cache[(NS, "invoices")] = ocrservice()
        self.batches = batch_controller.OcrBatches(runtime, services, settings=SETTINGS, progress_seconds=0)
        self.now = 1000.0
        self.batches.clock = lambda: self.now
        self.status = {"phase": "Running", "jobName": "archive"}

    def pod(self, obj: dict, log: str | None) -> None:
        self.store.apply_event("MODIFIED", obj)
        self.kube.logs[obj["metadata"]["name"]] = log

    def reconcile(self, at: float):
        self.now = at
        result = asyncio.run(self.batches.reconcile(batch(self.status, stallSeconds=STALL), Context(now=NOW)))
        if self.kube.status is not None:
            self.status = self.kube.status
        return result


def stalled_condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or () if c["type"] == "Stalled"), None)


def deleted(w: World) -> list[str]:
    return [name for verb, kind, name in w.kube.calls if verb == "delete" and kind == "Pod"]


def test_a_worker_whose_progress_keeps_moving_is_left_alone():
    w = World()
    for t in range(0, 300, 10):
        w.pod(pod("archive-0-a", "uid-a"), progress(t))
        result = w.reconcile(1000 + t)
        assert not deleted(w) and not [e for e in result.events if e[0] == "Warning"]
    assert stalled_condition(w.status) is None


def test_a_worker_whose_progress_stops_has_its_pod_deleted_with_a_condition_and_a_warning_naming_both():
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), progress(5))
    w.reconcile(1000)
    assert not deleted(w)
    w.reconcile(1059)
    assert not deleted(w)
    result = w.reconcile(1060)
    assert deleted(w) == ["archive-0-a"]
    (event,) = [e for e in result.events if e[1] == "Stalled"]
    assert event[0] == "Warning" and "index 0" in event[2] and "archive-0-a" in event[2] and "60 s" in event[2]
    cond = stalled_condition(w.status)
    assert (cond["status"], cond["reason"]) == ("True", "Stalled") and "archive-0-a" in cond["message"]
    w.reconcile(1061)  # the cache has not seen the deletion yet: deleted once
    assert deleted(w) == ["archive-0-a"]


def test_a_frozen_worker_on_a_node_whose_log_cannot_be_read_stalls_the_same():
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), None)
    w.reconcile(1000)
    w.reconcile(1060)
    assert deleted(w) == ["archive-0-a"]


def test_the_stalled_condition_turns_false_once_the_new_pod_of_the_index_moves_and_stays_through_the_end():
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), progress(5))
    w.reconcile(1000)
    w.reconcile(1060)
    w.pod(pod("archive-0-a", "uid-a", deleting=True), progress(5))
    w.pod(pod("archive-0-b", "uid-b", created="2026-12-03T12:06:00Z"), progress(5))
    w.reconcile(1070)
    assert stalled_condition(w.status)["status"] == "True"
    w.pod(pod("archive-0-b", "uid-b", created="2026-12-03T12:06:00Z"), progress(6))
    w.reconcile(1080)
    cond = stalled_condition(w.status)
    assert (cond["status"], cond["reason"]) == ("False", "Recovered")
    assert deleted(w) == ["archive-0-a"]


def test_a_pod_deleted_for_a_stall_still_there_stall_seconds_later_is_marked_failed_for_the_job_to_replace():
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), None)
    w.reconcile(1000)
    w.reconcile(1060)
    w.pod(pod("archive-0-a", "uid-a", deleting=True), None)  # its node never confirms
    w.reconcile(1119)
    assert not w.kube.pod_patches
    w.reconcile(1120)
    ((name, patch),) = w.kube.pod_patches
    assert name == "archive-0-a" and patch["status"]["phase"] == "Failed"
    w.reconcile(1130)
    assert len(w.kube.pod_patches) == 1


def test_a_recorded_callback_keeps_the_batchs_other_conditions():
    """The status is written whole: a write naming one condition keeps the others (Complete, Stalled)."""
    conditions = [{"type": "Ready", "status": "False", "reason": "Completed", "message": "m"},
                  {"type": "Complete", "status": "True", "reason": "Completed", "message": "m"}]
    merged = batch_controller._conditions(batch(), {"conditions": conditions},
                                          [batch_controller.C.Condition("Callback", "True", "Delivered", "ok")], NOW)
    assert [c["type"] for c in merged] == ["Callback", "Ready", "Complete"]
