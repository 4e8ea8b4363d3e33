"""A pod that carries an OcrService's labels but not its owner chain decides nothing.

Anyone who may create pods in the namespace can make one with the instance and revision labels.
Through the whole reconcile (the watch-fed cache, the snapshot, the rollout), such a decoy never
promotes a bad revision with a fake Ready nor forces a rollback with a fake OOM kill; the same pod
made by the Deployment's own ReplicaSet does. The ReplicaSets come from their watch, cached as
their owner chain only, and cost no request.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools

import pytest

from ocr_operator.ocrservice import naming

from .helpers import owner, reconcile
from .test_reconcile_requests import RecordingKube, listed_store

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
GOOD, BAD = "registry.example/ocr-server:1.0", "registry.example/ocr-server:2.0"
RV = itertools.count(9000)
MANAGED = {"app.kubernetes.io/managed-by": "causalflow-ocr-operator"}
# The decoys: no owner at all; a ReplicaSet the operator's label-filtered watch never delivers
# (someone else's, without the managed-by label); the real ReplicaSet's name with a made-up uid;
# a ReplicaSet carrying the labels whose controller is another Deployment.
DECOYS = ("no-owner", "foreign-replicaset", "forged-uid", "foreign-deployment")


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def merged(body: dict, patch: dict) -> dict:
    """`body` with a status merge patch applied (nested records come whole, with nulls for gone keys)."""
    status = dict(body.get("status") or {})
    for key, value in patch.items():
        if value is None:
            status.pop(key, None)
        else:
            status[key] = {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
    return {**body, "status": status}


def ref(kind: str, name: str, uid: str) -> dict:
    return {"apiVersion": "apps/v1" if kind != "Pod" else "v1", "kind": kind, "name": name, "uid": uid,
            "controller": True}


def replicaset(store, name: str, uid: str, deployment_uid: str) -> None:
    labels = {**naming.labels("ocr"), **MANAGED}
    store.apply_event("ADDED", {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": name, "namespace": "team-a", "uid": uid, "resourceVersion": f"rv-{next(RV)}", "labels": labels,
        "ownerReferences": [ref("Deployment", "ocr", deployment_uid)]}})


def pod(store, revision: str, owners: list[dict], *, ready: bool = False, oom: bool = False) -> None:
    status: dict = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if oom:
        status["containerStatuses"] = [{"name": "server", "restartCount": 1, "state": {"running": {}},
                                        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]
    store.apply_event("ADDED", {"kind": "Pod", "metadata": {
        "name": f"ocr-{next(RV)}", "namespace": "team-a", "resourceVersion": f"rv-{next(RV)}",
        "creationTimestamp": "2026-03-01T12:00:00Z", "ownerReferences": owners,
        "labels": {**naming.labels("ocr"), naming.REVISION_KEY: revision}}, "status": status})


def new_revision_pod(store, which: str, revision: str, **state) -> None:
    """A pod of `revision` made by `which`: "real" (the Deployment's ReplicaSet) or a decoy."""
    deployment_uid = store.objects[("Deployment", "team-a", "ocr")]["metadata"]["uid"]
    replicaset(store, "ocr-5d8f", "rs-uid", deployment_uid)  # the Deployment controller's, as watched
    owners = {"real": [ref("ReplicaSet", "ocr-5d8f", "rs-uid")],
              "no-owner": [],
              "foreign-replicaset": [ref("ReplicaSet", "someone-elses", "foreign-uid")],
              "forged-uid": [ref("ReplicaSet", "ocr-5d8f", "forged-uid")],
              "foreign-deployment": [ref("ReplicaSet", "decoy-rs", "decoy-rs-uid")]}[which]
    if which == "foreign-deployment":
        replicaset(store, "decoy-rs", "decoy-rs-uid", "foreign-deployment-uid")
    pod(store, revision, owners, **state)


def upgraded(kube, store) -> tuple[dict, str, str]:
    """GOOD settled (the last good revision), then BAD rolled out: (the OcrService, good, bad).
    The Deployment reports one Ready replica: GOOD's pod, still running during the rollout."""
    body = owner({"replicas": 1, "image": GOOD})
    run(reconcile(kube, body, now=NOW, store=store))
    good, digest = kube.status["currentRevision"], kube.status["rollout"]["currentDigest"]
    body = owner({"replicas": 1, "image": BAD}, generation=2,
                 status={"rollout": {"phase": "Healthy", "currentRevision": good, "lastGoodRevision": good,
                                     "currentDigest": digest, "lastGoodDigest": digest}})
    result = run(reconcile(kube, body, now=NOW, store=store))
    body = merged(body, result.status["status"])
    key = ("Deployment", "team-a", "ocr")
    dep = copy.deepcopy(store.objects[key])
    dep["metadata"].update(resourceVersion=f"rv-{next(RV)}", generation=2)
    dep["status"] = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1}
    store.apply_event("MODIFIED", dep)
    bad = body["status"]["rollout"]["currentRevision"]
    assert bad != good and body["status"]["rollout"]["phase"] == "Progressing"
    return body, good, bad


def reconciled(kube, store, body: dict, seconds: float) -> tuple[dict, list[str]]:
    result = run(reconcile(kube, body, now=NOW + dt.timedelta(seconds=seconds), store=store))
    body = merged(body, result.status["status"]) if result.status is not None else body
    return body, [reason for _, reason, _ in result.events]


@pytest.mark.parametrize("decoy", DECOYS)
def test_a_decoy_ready_pod_of_the_new_revision_does_not_promote_it(decoy):
    kube, store = RecordingKube(), listed_store()
    body, good, bad = upgraded(kube, store)
    new_revision_pod(store, decoy, bad, ready=True)
    body, _ = reconciled(kube, store, body, 1)
    body, events = reconciled(kube, store, body, 60)  # past settleSeconds
    assert "RolloutSucceeded" not in events
    assert body["status"]["rollout"]["phase"] == "Progressing"
    assert body["status"]["rollout"]["lastGoodRevision"] == good


def test_the_deployments_own_ready_pod_of_the_new_revision_promotes_it():
    kube, store = RecordingKube(), listed_store()
    body, good, bad = upgraded(kube, store)
    new_revision_pod(store, "real", bad, ready=True)
    body, _ = reconciled(kube, store, body, 1)
    body, events = reconciled(kube, store, body, 60)
    assert "RolloutSucceeded" in events and body["status"]["rollout"]["lastGoodRevision"] == bad


@pytest.mark.parametrize("decoy", DECOYS)
def test_a_decoy_oomkilled_pod_of_the_new_revision_forces_no_rollback(decoy):
    kube, store = RecordingKube(), listed_store()
    body, good, bad = upgraded(kube, store)
    new_revision_pod(store, decoy, bad, oom=True)
    body, events = reconciled(kube, store, body, 2)
    assert "RolledBack" not in events and body["status"]["rollout"]["phase"] == "Progressing"
    assert store.objects[("Deployment", "team-a", "ocr")]["metadata"]["annotations"][naming.REVISION_KEY] == bad


def test_the_deployments_own_oomkilled_pod_of_the_new_revision_rolls_it_back():
    kube, store = RecordingKube(), listed_store()
    body, good, bad = upgraded(kube, store)
    new_revision_pod(store, "real", bad, oom=True)
    body, events = reconciled(kube, store, body, 2)
    assert "RolledBack" in events and body["status"]["rollout"]["failedReason"] == "OOMKilled"


def test_the_owner_chain_costs_no_request():
    kube, store = RecordingKube(), listed_store()
    body, good, bad = upgraded(kube, store)
    new_revision_pod(store, "real", bad, ready=True)
    kube.calls.clear()
    reconciled(kube, store, body, 1)
    assert [c for c in kube.calls if c[0] in ("get", "list")] == []


def test_a_replicaset_is_cached_as_its_owner_chain_and_only_a_change_of_it_wakes_the_owner():
    store = listed_store()
    labels = {**naming.labels("ocr"), **MANAGED}
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": "ocr-5d8f", "namespace": "team-a", "uid": "rs-uid", "resourceVersion": "1", "labels": labels,
        "annotations": {"deployment.kubernetes.io/revision": "1"},
        "ownerReferences": [ref("Deployment", "ocr", "dep-uid")]},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "server", "image": GOOD}]}}},
        "status": {"replicas": 0}}
    assert store.apply_event("ADDED", rs)  # a new ReplicaSet: its pods may be waiting for it
    kept = store.objects[("ReplicaSet", "team-a", "ocr-5d8f")]
    assert "spec" not in kept and "status" not in kept and kept["metadata"]["uid"] == "rs-uid"
    scaled = copy.deepcopy(rs)
    scaled["metadata"].update(resourceVersion="2", annotations={"deployment.kubernetes.io/revision": "2"})
    scaled["spec"]["replicas"], scaled["status"] = 2, {"replicas": 2, "readyReplicas": 1}
    assert not store.apply_event("MODIFIED", scaled)
    assert store.apply_event("DELETED", scaled)


def test_in_a_namespace_never_listed_a_replicaset_a_pod_names_is_read_once_then_remembered():
    """A namespace the cache could not list (a glob pattern): the ReplicaSet a pod names is read
    with one GET and remembered, someone else's too (as its owner chain), never once a reconcile."""
    from ocr_operator import wiring

    from .helpers import ClusterKube

    theirs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
        "name": "someone-elses", "namespace": "team-a", "uid": "foreign-uid", "labels": naming.labels("ocr"),
        "ownerReferences": [ref("Deployment", "theirs", "their-deployment-uid")]}}
    decoy = {"kind": "Pod", "metadata": {
        "name": "decoy", "namespace": "team-a", "creationTimestamp": "2026-03-01T12:00:00Z",
        "ownerReferences": [ref("ReplicaSet", "someone-elses", "foreign-uid")],
        "labels": {**naming.labels("ocr"), naming.REVISION_KEY: "bbbbbbbbbb"}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    kube, store = ClusterKube({("ReplicaSet", "someone-elses"): theirs, ("Pod", "decoy"): decoy}), wiring.store()
    body = owner({"replicas": 1})
    run(reconcile(kube, body, now=NOW, store=store))
    run(reconcile(kube, {**body, "status": kube.status}, now=NOW, store=store))
    assert [c for c in kube.calls if c[1] == "ReplicaSet"] == [("get", "ReplicaSet", "someone-elses")]
