"""plan(): desired vs live children -> create / update / delete / skip, compared on our fields only."""

from __future__ import annotations

import copy

from ocr_operator.labels import APPLIED_HASH_KEY, FIELD_MANAGER
from ocr_operator.ocrservice.children import child_names
from ocr_operator.ocrservice.render import render_all
from ocr_operator.runtime import drift as D
from ocr_operator.runtime import plan as P

from .helpers import owner, parsed

UID = "11111111-2222-3333-4444-555555555555"
OWNER = P.Owner("OcrService", "ocr", UID)


def plan_one(key, desired_obj, observed, uid, name):
    return P.plan_one(key, desired_obj, observed, P.Owner("OcrService", "ocr", uid), name, APPLIED_HASH_KEY)


def desired(spec=None):
    body = owner(spec)
    return render_all(body, parsed(body)).objects


def as_live(obj, **extra_annotations):
    """What the API server returns for an applied object: our fields plus server defaults."""
    live = copy.deepcopy(P.stamp(obj, APPLIED_HASH_KEY))
    live["metadata"].update(uid="child-uid", resourceVersion="42", creationTimestamp="2026-11-29T10:00:00Z",
                            managedFields=[{"manager": FIELD_MANAGER, "operation": "Apply",
                                            "fieldsV1": {"f:spec": {"f:replicas": {}}} if "replicas" in obj.get("spec", {}) else {}}])
    live["metadata"]["annotations"].update(extra_annotations)
    if live["kind"] == "Deployment":
        spec = live["spec"]
        spec.setdefault("replicas", 1)
        pod = spec["template"]["spec"]
        pod.update(restartPolicy="Always", dnsPolicy="ClusterFirst", schedulerName="default-scheduler")
        c = pod["containers"][0]
        c.update(terminationMessagePath="/dev/termination-log")
        c["ports"][0]["protocol"] = "TCP"
        c["resources"]["requests"]["cpu"] = "2000m" if c["resources"]["requests"]["cpu"] == "2" else c["resources"]["requests"]["cpu"]
        live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
        live["status"] = {"replicas": 1, "readyReplicas": 1}
    if live["kind"] == "Service":
        live["spec"].update(clusterIP="10.96.0.12", clusterIPs=["10.96.0.12"], sessionAffinity="None")
    return live


def test_a_missing_child_is_created():
    a = plan_one("Service", desired()["Service"], None, UID, "ocr")
    assert a.verb == P.CREATE
    assert a.body["metadata"]["annotations"][APPLIED_HASH_KEY]


def test_a_child_in_shape_is_skipped_despite_server_defaults():
    for kind, obj in desired().items():
        if obj is None:
            continue
        a = plan_one(kind, obj, as_live(obj), UID, obj["metadata"]["name"])
        assert a.verb == P.SKIP, str(a)


def test_a_spec_change_updates_the_child():
    live = as_live(desired()["Deployment"])
    a = plan_one("Deployment", desired({"image": "registry.example/ocr-server:2.0"})["Deployment"], live, UID, "ocr")
    assert (a.verb, a.reason) == (P.UPDATE, "spec changed")


def test_an_edited_field_is_drift_and_is_put_back():
    want = desired()["Deployment"]
    live = as_live(want)
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:latest"
    a = plan_one("Deployment", want, live, UID, "ocr")
    assert (a.verb, a.reason) == (P.UPDATE, "drift")
    assert any("image" in d for d in a.diffs), a.diffs


def test_a_removed_label_is_drift():
    want = desired()["Service"]
    live = as_live(want)
    del live["metadata"]["labels"]["app.kubernetes.io/instance"]
    assert plan_one("Service", want, live, UID, "ocr").verb == P.UPDATE


def test_the_hpas_choice_in_spec_replicas_reaches_the_deployment():
    live = as_live(desired({"replicas": 2, "autoscaling": {"maxReplicas": 5}})["Deployment"])
    a = plan_one("Deployment", desired({"replicas": 4, "autoscaling": {"maxReplicas": 5}})["Deployment"], live,
                   UID, "ocr")
    assert a.verb == P.UPDATE and a.body["spec"]["replicas"] == 4


def test_a_deployment_resized_by_someone_else_is_drift_put_back():
    want = desired({"replicas": 2, "autoscaling": {"maxReplicas": 5}})["Deployment"]
    live = as_live(want)
    live["spec"]["replicas"] = 4  # `kubectl scale deployment`: the OcrService says 2
    a = plan_one("Deployment", want, live, UID, "ocr")
    assert a.verb == P.UPDATE and a.reason == "drift"


def test_a_child_disabled_in_the_spec_is_deleted_when_ours():
    live = as_live(desired({"networkPolicy": {"enabled": True}})["NetworkPolicy"])
    a = plan_one("NetworkPolicy", None, live, UID, "ocr")
    assert a.verb == P.DELETE


def test_an_unwanted_object_of_someone_else_is_left_alone():
    live = as_live(desired({"networkPolicy": {"enabled": True}})["NetworkPolicy"])
    live["metadata"]["ownerReferences"] = []
    assert plan_one("NetworkPolicy", None, live, UID, "ocr").verb == P.SKIP


def test_a_foreign_object_with_our_name_is_a_conflict_not_a_takeover():
    want = desired()["Service"]
    live = as_live(want)
    live["metadata"]["ownerReferences"] = [{"uid": "someone-else"}]
    assert plan_one("Service", want, live, UID, "ocr").verb == P.CONFLICT


def test_a_child_being_deleted_is_waited_for():
    want = desired()["Service"]
    live = as_live(want)
    live["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert plan_one("Service", want, live, UID, "ocr").verb == P.SKIP


def test_named_lists_compare_by_name_ignoring_extra_live_items():
    want = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    live = {"env": [{"name": "X", "value": "9"}, {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}
    assert D.subset_diff(want, live) == []


def test_named_lists_in_another_order_are_drift():
    want = {"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "$(A)"}]}
    live = {"env": [{"name": "B", "value": "$(A)"}, {"name": "A", "value": "1"}]}
    assert D.subset_diff(want, live) == [".env: order"]


def test_quantities_compare_by_value():
    assert D.subset_diff({"cpu": "0.5", "memory": "1Gi"}, {"cpu": "500m", "memory": "1024Mi"}) == []
    assert D.subset_diff({"cpu": "1"}, {"cpu": "2"}) != []


def test_an_empty_rendered_list_matches_a_field_the_server_dropped():
    assert D.subset_diff({"spec": {"ingress": []}}, {"spec": {}}) == []


def test_the_plan_has_one_action_per_kind_in_apply_order():
    objs = desired()
    actions = P.plan(objs, {}, OWNER, child_names("ocr"), APPLIED_HASH_KEY)
    assert [a.key for a in actions] == list(objs)
    assert [a.key for a in actions].index("HorizontalPodAutoscaler") < [a.key for a in actions].index("Deployment")


def test_stamping_is_stable_and_ignores_an_old_stamp():
    obj = desired()["ConfigMap"]
    once = P.stamp(obj, APPLIED_HASH_KEY)
    assert P.stamp(once, APPLIED_HASH_KEY) == once
