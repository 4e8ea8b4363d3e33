"""A same-named object the OcrService does not control is never applied, adopted or read as its own.

The kinds the operator applies are listed and watched unfiltered, so the cache knows an object
of someone else with a child's name (as a stub of its metadata) and the apply's ownership check
asks nothing: these tests give the reconcile a cache primed like the runtime's and an API that
holds such an object.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from ocr_operator import labels, wiring
from ocr_operator.ocrservice import children, naming
from ocr_operator.runtime import plan as P
from ocr_operator.runtime.cache import Store
from .helpers import reconcile
from ocr_operator.ocrservice.render import render_all

from .helpers import ClusterKube, owner, parsed

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
UID = "11111111-2222-3333-4444-555555555555"


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def primed_store(kube: ClusterKube) -> Store:
    """The cache as the runtime primes it: one list per watched kind, the applied kinds unfiltered."""
    store = wiring.store()
    for kind in children.watched():
        store.mark_listed(kind.kind, "team-a", run(kube.list(kind.kind, "team-a",
                                                             None if kind.owned else labels.MANAGED_SELECTOR)))
    kube.calls.clear()
    return store


def users_service(name: str = "ocr") -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "team-a", "uid": "users-service", "resourceVersion": "7",
                         "labels": {"app": "legacy"}},
            "spec": {"selector": {"app": "legacy"}, "ports": [{"port": 80, "targetPort": 9000}]}}


def users_configmap(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "team-a", "uid": "users-configmap", "resourceVersion": "8"},
            "data": {"important": "yes"}}


def applied(kube: ClusterKube) -> set[tuple[str, str]]:
    return {(kind, name) for verb, kind, name in kube.calls if verb == "apply"}


def test_a_same_named_service_without_our_label_is_never_applied():
    kube = ClusterKube({("Service", "ocr"): users_service()})
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=primed_store(kube)))
    assert ("Service", "ocr") not in applied(kube)
    assert kube.objects[("Service", "ocr")] == users_service()  # no ownerReference, no label, same spec


def test_the_other_children_are_still_applied_beside_a_conflict():
    kube = ClusterKube({("Service", "ocr"): users_service()})
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=primed_store(kube)))
    assert {("Deployment", "ocr"), ("ConfigMap", "ocr-config"), ("ConfigMap", "ocr-revisions")} <= applied(kube)


def test_a_same_named_configmap_is_reported_as_a_child_conflict_in_ready_and_degraded():
    kube = ClusterKube({("ConfigMap", "ocr-config"): users_configmap("ocr-config")})
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=primed_store(kube)))
    conds = {c["type"]: c for c in kube.status["conditions"]}
    for type_, status in (("Ready", "False"), ("Degraded", "True")):
        assert (conds[type_]["status"], conds[type_]["reason"]) == (status, "ChildConflict"), conds[type_]
        assert "ConfigMap ocr-config" in conds[type_]["message"]
    assert ("ConfigMap", "ocr-config") not in applied(kube)


def test_a_conflict_is_told_by_a_warning_event_naming_the_kind_and_the_name():
    kube = ClusterKube({("ConfigMap", "ocr-revisions"): users_configmap("ocr-revisions")})
    result = run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=primed_store(kube)))
    warnings = [(reason, msg) for type_, reason, msg in result.events if type_ == "Warning"]
    assert len(warnings) == 1 and warnings[0][0] == "ChildConflict", result.events
    assert "ConfigMap ocr-revisions" in warnings[0][1]  # the kind, not the operator's internal key


def test_a_conflict_found_again_is_told_again_and_still_not_applied():
    kube = ClusterKube({("Service", "ocr"): users_service()})
    store = primed_store(kube)
    body = owner({"replicas": 1})
    run(reconcile(kube, body, now=NOW, store=store))
    kube.calls.clear()
    again = run(reconcile(kube, {**body, "status": kube.status}, now=NOW, store=store))
    assert ("Service", "ocr") not in applied(kube)
    assert [r for t, r, _ in again.events if t == "Warning"] == ["ChildConflict"]


def test_once_the_users_object_is_gone_the_child_is_created():
    kube = ClusterKube({("Service", "ocr"): users_service()})
    store = primed_store(kube)
    body = owner({"replicas": 1})
    run(reconcile(kube, body, now=NOW, store=store))
    del kube.objects[("Service", "ocr")]
    store.apply_event("DELETED", users_service())  # the unfiltered watch of Services tells it
    run(reconcile(kube, {**body, "status": kube.status}, now=NOW, store=store))
    assert ("Service", "ocr") in applied(kube)


def test_a_users_revisions_configmap_is_not_read_as_the_revision_history():
    body = owner({"replicas": 1})
    desired = render_all(body, parsed(body), now=NOW).revision
    evil = {"metadata": {"labels": {naming.REVISION_KEY: "evil"}},
            "spec": {"containers": [{"name": "server", "image": "attacker/image:1"}]}}
    users = users_configmap("ocr-revisions")
    users["data"] = {"history.json": json.dumps([{"revision": "evil", "template": evil}])}
    kube = ClusterKube({("ConfigMap", "ocr-revisions"): users})
    # The desired revision failed and was rolled back to "evil", the last good one by the status.
    body["status"] = {"rollout": {"phase": "RolledBack", "currentRevision": "evil", "lastGoodRevision": "evil",
                                  "failedRevision": desired, "failedReason": "OOMKilled"}}
    run(reconcile(kube, body, now=NOW, store=wiring.store()))  # nothing listed: the snapshot GETs every child
    dep = kube.objects[("Deployment", "ocr")]
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] != "attacker/image:1"
    assert kube.objects[("ConfigMap", "ocr-revisions")] == users


def test_a_users_deployment_is_not_read_as_the_rollouts_deployment():
    users = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "ocr", "namespace": "team-a", "uid": "users-dep", "resourceVersion": "3",
                          "generation": 1},
             "spec": {"replicas": 4}, "status": {"observedGeneration": 1, "replicas": 4, "readyReplicas": 4}}
    kube = ClusterKube({("Deployment", "ocr"): users})
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=wiring.store()))
    assert kube.status["readyReplicas"] == 0 and kube.status["replicas"] == 0


def test_the_ownership_checks_of_a_new_objects_children_cost_no_request():
    kube = ClusterKube()
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=primed_store(kube)))
    assert applied(kube) and {verb for verb, _, _ in kube.calls} == {"apply", "patch"}  # no GET, no LIST


def test_a_users_object_that_appears_after_the_list_is_told_by_its_watch_event_and_left_alone():
    kube = ClusterKube()
    store = primed_store(kube)
    kube.objects[("Service", "ocr")] = users_service()
    store.apply_event("ADDED", users_service())  # the unfiltered watch of Services delivers it
    run(reconcile(kube, owner({"replicas": 1}), now=NOW, store=store))
    assert ("Service", "ocr") not in applied(kube) and kube.objects[("Service", "ocr")] == users_service()


def test_an_owner_reference_to_us_that_is_not_the_controller_is_not_control():
    live = {"metadata": {"ownerReferences": [{"uid": UID, "controller": False}]}}
    assert not P.controlled_by(live, UID)
    live["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}, {"uid": UID, "controller": True}]
    assert P.controlled_by(live, UID)
