"""Requests a reconcile makes with the watch-fed cache: no GET for what the watches delivered (the
ownership checks included), zero requests when nothing changed, the echo of its own writes is no
news, and a new object's whole bill from create to settled (the operator bench's bar, 12 per object)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools

from ocr_operator import wiring
from ocr_operator.labels import IDENTITY
from ocr_operator.ocrservice import children, naming
from ocr_operator.runtime.cache import Store

from .helpers import owner, parsed, reconcile

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
RV = itertools.count(100)


class RecordingKube:
    """Answers like the API server for applies and status patches; records every call."""

    identity = IDENTITY

    def __init__(self):
        self.calls: list[tuple[str, str]] = []
        self.requests = 0

    async def apply(self, body, *, manager="x", force=True, subresource=None):
        self.calls.append(("apply", body["kind"]))
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = f"rv-{next(RV)}"
        out["metadata"]["uid"] = "child-uid"
        return out

    async def merge_patch(self, kind, namespace, name, patch, *, subresource=None):
        self.calls.append(("patch", f"{kind}/{subresource}"))
        self.status = patch["status"]
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": f"rv-{next(RV)}"},
                "status": patch["status"]}

    async def get(self, kind, namespace, name):
        self.calls.append(("get", kind))
        return None

    async def list(self, kind, namespace, label_selector=None):
        self.calls.append(("list", kind))
        return []


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def listed_store() -> Store:
    store = wiring.store()
    for kind in children.watched():
        store.mark_listed(kind.kind, "team-a", [])
    return store


def test_a_new_object_costs_its_writes_only_and_a_repeat_reconcile_costs_nothing():
    kube, store = RecordingKube(), listed_store()
    body = owner({"replicas": 1})
    first = run(reconcile(kube, body, now=NOW, store=store))
    verbs = {verb for verb, _ in kube.calls}
    # No GET, no LIST: the cache's unfiltered lists know every taken name, so the ownership check
    # of each create (a same-named object of someone else is never taken over) asks nothing.
    assert verbs == {"apply", "patch"}, kube.calls
    assert first.writes == len(kube.calls)
    kube.calls.clear()
    body = {**body, "status": kube.status}
    second = run(reconcile(kube, body, now=NOW, store=store))
    assert kube.calls == [] and second.writes == 0


def test_the_watch_echo_of_our_own_writes_is_no_news():
    kube, store = RecordingKube(), listed_store()
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=store))
    for key, obj in list(store.objects.items()):
        if obj is not None:
            assert store.apply_event("MODIFIED", copy.deepcopy(obj)) is False, key


def test_without_a_listed_namespace_each_child_is_read_once_then_remembered():
    kube, store = RecordingKube(), wiring.store()
    body = owner({"replicas": 1})
    run(reconcile(kube, body, now=NOW, store=store))
    gets = [c for c in kube.calls if c[0] in ("get", "list")]
    optional = [c for c in children.CHILDREN if c.kind in children.optional_kinds()]
    assert len(gets) == len(children.CHILDREN) - len(optional) + 1  # every child but ServiceMonitor/PrometheusRule, and the pods
    kube.calls.clear()
    run(reconcile(kube, {**body, "status": kube.status}, now=NOW, store=store))
    assert kube.calls == []


def test_a_reconcile_renders_the_children_once_when_the_desired_revision_is_the_target(monkeypatch):
    from ocr_operator.ocrservice import reconcile as module

    calls = []
    real = module.render_all
    monkeypatch.setattr(module, "render_all", lambda *a, **kw: calls.append(kw.get("pod_template")) or real(*a, **kw))
    kube, store = RecordingKube(), listed_store()
    result = run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=store))
    assert result.writes > 0
    assert calls == [None]  # rendered once, with its own fresh template


def _deployment_reports(store, body, *, ready: int) -> None:
    """The Deployment controller's status report, as its watch event brings it."""
    key = ("Deployment", "team-a", body["metadata"]["name"])
    dep = copy.deepcopy(store.objects[key])
    dep["metadata"]["resourceVersion"] = f"rv-{next(RV)}"
    dep["metadata"]["generation"] = dep["metadata"].get("generation") or 1
    dep["status"] = {"observedGeneration": dep["metadata"]["generation"], "replicas": 2, "updatedReplicas": 2,
                     "readyReplicas": ready}
    store.objects[key] = dep


def test_a_status_of_counts_only_waits_for_the_hold_and_asks_to_be_woken_then():
    kube, store = RecordingKube(), listed_store()
    body = owner({"replicas": 2})
    run(reconcile(kube, body, now=NOW, store=store))
    body = {**body, "status": kube.status}
    _deployment_reports(store, body, ready=0)  # pods created, none Ready: counts and messages change
    kube.calls.clear()
    held = run(reconcile(kube, body, now=NOW, store=store, status_hold=1.5))
    assert kube.calls == [] and held.status_held and held.requeue_after == 1.5
    written = run(reconcile(kube, body, now=NOW, store=store, status_hold=0.0))  # the hold is over
    assert kube.calls == [("patch", "OcrService/status")] and not written.status_held
    assert kube.status["replicas"] == 2


def test_a_condition_change_is_written_at_once_despite_a_hold():
    kube, store = RecordingKube(), listed_store()
    body = owner({"replicas": 2})
    run(reconcile(kube, body, now=NOW, store=store))
    body = {**body, "status": kube.status}
    _deployment_reports(store, body, ready=2)
    kube.calls.clear()
    result = run(reconcile(kube, body, now=NOW, store=store, status_hold=1.5))
    assert ("patch", "OcrService/status") in kube.calls and not result.status_held


def test_a_held_transition_tells_its_event_once_when_it_is_written():
    kube, store = RecordingKube(), listed_store()
    body = owner({"autoscaling": {"minReplicas": 1, "maxReplicas": 3}})
    run(reconcile(kube, body, now=NOW, store=store))
    body = {**body, "status": kube.status}
    key = ("HorizontalPodAutoscaler", "team-a", body["metadata"]["name"])
    hpa = copy.deepcopy(store.objects[key])
    hpa["status"] = {"conditions": [{"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound",
                                     "message": "ok"}]}
    store.objects[key] = hpa
    run(reconcile(kube, body, now=NOW, store=store))  # autoscaling worked ...
    body = {**body, "status": {**body["status"], **kube.status}}  # the patch merged
    hpa = copy.deepcopy(hpa)
    hpa["status"] = {"conditions": [{"type": "ScalingActive", "status": "False", "reason": "FailedGetPodsMetric",
                                     "message": "no metric"}]}
    store.objects[key] = hpa  # ... and stopped: the metric is gone
    held = run(reconcile(kube, body, now=NOW, store=store, status_hold=1.5))
    assert held.status_held and held.events == []
    written = run(reconcile(kube, body, now=NOW, store=store, status_hold=0.0))
    assert [e[1] for e in written.events] == ["FailedGetPodsMetric"]


def _replicaset(deployment: dict) -> dict:
    """The Deployment controller's ReplicaSet, as its watch event brings it."""
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"],
           "uid": deployment["metadata"]["uid"], "controller": True}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": "ocr-5d8f", "namespace": "team-a", "uid": "rs-uid", "resourceVersion": f"rv-{next(RV)}",
        "labels": deployment["spec"]["template"]["metadata"]["labels"], "ownerReferences": [ref]}}


def _pod(body, revision: str, *, ready: bool) -> dict:
    """A pod of the ReplicaSet `_replicaset` makes (the ReplicaSet controller's)."""
    ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "ocr-5d8f", "uid": "rs-uid", "controller": True}
    return {"kind": "Pod", "metadata": {
        "name": "ocr-1", "namespace": "team-a", "resourceVersion": f"rv-{next(RV)}",
        "creationTimestamp": "2026-03-01T12:00:00Z", "ownerReferences": [ref],
        "labels": {**naming.selector_labels(body["metadata"]["name"]), naming.REVISION_KEY: revision}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class NewObject:
    """One new OcrService's life through its reconciles, as the controller drives it: each `step`
    reconciles it at a time (seconds after NOW) with a status hold and keeps what the status patch
    returned; `deployment_reports` is the Deployment controller's report, as its watch event brings it."""

    def __init__(self):
        self.kube, self.store = RecordingKube(), listed_store()
        self.body = owner({"autoscaling": {"minReplicas": 1, "maxReplicas": 2}})
        self.events: list[str] = []
        self.patches_at: list[float] = []  # when each status patch was written

    def patches(self) -> list[tuple[str, str]]:
        return [c for c in self.kube.calls if c[0] == "patch"]

    def step(self, at: float, hold: float = 0.0):
        before = len(self.patches())
        result = run(reconcile(self.kube, self.body, now=NOW + dt.timedelta(seconds=at), store=self.store,
                               status_hold=hold))
        self.events.extend(e[1] for e in result.events)
        if result.status is not None:
            merged = {**(self.body.get("status") or {}), **result.status["status"]}
            self.body = {**self.body, "status": {k: v for k, v in merged.items() if v is not None}}
        self.patches_at.extend([at] * (len(self.patches()) - before))
        return result

    def deployment_reports(self, ready: int) -> None:
        dep_key = ("Deployment", "team-a", "ocr")
        revision = self.store.objects[dep_key]["metadata"]["annotations"][naming.REVISION_KEY]
        dep = copy.deepcopy(self.store.objects[dep_key])
        dep["metadata"].update(resourceVersion=f"rv-{next(RV)}", generation=1)
        dep["status"] = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "readyReplicas": ready}
        assert self.store.apply_event("MODIFIED", dep)
        self.store.apply_event("MODIFIED", _replicaset(dep))
        assert self.store.apply_event("MODIFIED", _pod(self.body, revision, ready=bool(ready)))


def test_a_new_object_from_create_to_settled_costs_six_applies_three_status_patches_and_two_events():
    """The operator's API bill for one new OcrService (bench/operator_bench.py counts it at scale,
    bar 12 requests per object): its six children applied once, a status patch when the rollout
    starts, when it turns Ready and when it settles, RolloutStarted and RolloutSucceeded; the
    Deployment's intermediate report (pods created, none Ready) waits for the hold and is
    written with the Ready patch; no GET, and nothing once settled."""
    obj = NewObject()
    kube = obj.kube
    obj.step(0)
    obj.deployment_reports(ready=0)
    assert obj.step(0.5, hold=1.5).status_held  # counts and messages only: held
    obj.deployment_reports(ready=1)
    obj.step(1.0, hold=1.0)  # Ready: written at once, with the held counts
    settle = parsed(obj.body).rollout.settle_seconds
    obj.step(1.0 + settle + 1)  # settled
    calls_before = list(kube.calls)
    obj.step(1.0 + settle + 5)
    assert kube.calls == calls_before  # nothing more to say
    applies = [kind for verb, kind in kube.calls if verb == "apply"]
    assert sorted(applies) == sorted(["ConfigMap", "ConfigMap", "HorizontalPodAutoscaler", "Deployment", "Service",
                                      "PodDisruptionBudget"])
    assert obj.patches() == [("patch", "OcrService/status")] * 3
    assert obj.events == ["RolloutStarted", "RolloutSucceeded"]
    assert obj.body["status"]["rollout"]["phase"] == "Healthy" and obj.body["status"]["replicas"] == 1
    assert len(kube.calls) + len(obj.events) <= 12


def test_a_new_object_whose_pods_are_ready_within_the_hold_costs_two_status_patches_and_two_events():
    """The first report (the rollout begun, nothing wrong) waits like counts do (status.first_report),
    with its RolloutStarted: the reconcile that finds the pods Ready decides the rollout's start again
    and writes it together with Ready. No status and no Event before that, one RolloutStarted after."""
    obj = NewObject()
    first = obj.step(0, hold=2.0)  # a new object: nothing written yet, the whole coalescing period
    assert first.status_held and first.requeue_after == 2.0 and first.events == [] and "status" not in obj.body
    assert len([c for c in obj.kube.calls if c[0] == "apply"]) == 6  # its children are not held
    obj.deployment_reports(ready=1)
    obj.step(1.0, hold=1.0)  # Ready: urgent, the whole first report with it
    assert obj.body["status"]["observedGeneration"] == 1 and obj.body["status"]["rollout"]["phase"] == "Progressing"
    assert obj.body["status"]["rollout"]["startedAt"].startswith("2026-03-01T12:00:01")  # decided again, then
    settle = parsed(obj.body).rollout.settle_seconds
    obj.step(1.0 + settle + 1)  # settled
    assert obj.body["status"]["rollout"]["phase"] == "Healthy"
    assert obj.patches_at == [1.0, 1.0 + settle + 1]
    assert obj.events == ["RolloutStarted", "RolloutSucceeded"]
