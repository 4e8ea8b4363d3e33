"""Which pods are an OcrService's (rollout/owners.py): only those of its own Deployment's
ReplicaSets, by uid; a pod that carries the labels alone is a decoy anyone could create."""

from __future__ import annotations

from ocr_operator.ocrservice.rollout.owners import controlled_pods, replicaset_names

OWNER_UID, DEPLOYMENT_UID, RS_UID = "owner-uid", "deployment-uid", "rs-uid"
LABELS = {"app.kubernetes.io/name": "causalflow-ocr", "app.kubernetes.io/instance": "ocr",
          "ocr.causalflow.dev/revision": "bbbbbbbbbb"}


def ref(kind: str, name: str, uid: str, *, controller: bool = True) -> dict:
    return {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": uid, "controller": controller}


def deployment(owner_uid: str = OWNER_UID) -> dict:
    return {"kind": "Deployment", "metadata": {"name": "ocr", "uid": DEPLOYMENT_UID,
                                                 "ownerReferences": [ref("OcrService", "ocr", owner_uid)]}}


def replicaset(name: str = "ocr-5d8f", uid: str = RS_UID, deployment_uid: str = DEPLOYMENT_UID) -> dict:
    return {"kind": "ReplicaSet", "metadata": {"name": name, "uid": uid, "labels": LABELS,
                                                 "ownerReferences": [ref("Deployment", "ocr", deployment_uid)]}}


def pod(name: str, *owners: dict) -> dict:
    return {"kind": "Pod", "metadata": {"name": name, "labels": LABELS, "ownerReferences": list(owners)},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}


REAL = pod("ocr-5d8f-abcde", ref("ReplicaSet", "ocr-5d8f", RS_UID))


def names(pods) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_the_pods_of_the_deployments_own_replicasets_count():
    older = replicaset("ocr-1a2b", "rs-old-uid")
    old_pod = pod("ocr-1a2b-xyz", ref("ReplicaSet", "ocr-1a2b", "rs-old-uid"))
    pods = controlled_pods([REAL, old_pod], {"ocr-5d8f": replicaset(), "ocr-1a2b": older}, deployment(), OWNER_UID)
    assert names(pods) == ["ocr-5d8f-abcde", "ocr-1a2b-xyz"]


def test_a_pod_with_the_labels_and_no_owner_is_ignored():
    pods = controlled_pods([REAL, pod("decoy")], {"ocr-5d8f": replicaset()}, deployment(), OWNER_UID)
    assert names(pods) == ["ocr-5d8f-abcde"]


def test_a_pod_of_a_foreign_replicaset_is_ignored():
    """A ReplicaSet the cache does not hold (not the operator's: no managed-by label), and one that
    the pod names by the real ReplicaSet's name but with another uid."""
    foreign = pod("decoy-foreign", ref("ReplicaSet", "someone-elses", "foreign-uid"))
    forged = pod("decoy-forged", ref("ReplicaSet", "ocr-5d8f", "forged-uid"))
    pods = controlled_pods([foreign, forged, REAL], {"ocr-5d8f": replicaset()}, deployment(), OWNER_UID)
    assert names(pods) == ["ocr-5d8f-abcde"]


def test_a_pod_of_a_replicaset_of_a_foreign_deployment_is_ignored():
    theirs = replicaset("decoy-rs", "decoy-rs-uid", deployment_uid="foreign-deployment-uid")
    decoy = pod("decoy", ref("ReplicaSet", "decoy-rs", "decoy-rs-uid"))
    pods = controlled_pods([decoy, REAL], {"ocr-5d8f": replicaset(), "decoy-rs": theirs}, deployment(), OWNER_UID)
    assert names(pods) == ["ocr-5d8f-abcde"]


def test_a_pod_naming_the_replicaset_as_a_mere_owner_not_its_controller_is_ignored():
    decoy = pod("decoy", ref("ReplicaSet", "ocr-5d8f", RS_UID, controller=False))
    assert controlled_pods([decoy], {"ocr-5d8f": replicaset()}, deployment(), OWNER_UID) == []


def test_no_pod_counts_when_the_deployment_is_not_controlled_by_the_ocrservice():
    rss = {"ocr-5d8f": replicaset()}
    assert controlled_pods([REAL], rss, deployment(owner_uid="someone-else"), OWNER_UID) == []
    assert controlled_pods([REAL], rss, None, OWNER_UID) == []


def test_the_replicasets_to_look_up_are_the_ones_pods_name_as_their_controller():
    mere_owner = pod("x", ref("ReplicaSet", "not-controller", "u", controller=False))
    assert replicaset_names([REAL, pod("decoy"), mere_owner]) == {"ocr-5d8f"}
