"""The quality gate inside one reconcile (against an in-memory API): unusable golden pages hold a
new revision back, a finished gate job's verdict fails or admits the revision, and an OcrService
without a gate reads and writes nothing of the gate's."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt

from ocr_operator.ocrservice import naming, revisions
from ocr_operator.ocrservice.render import render_all
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import pages as PG
from ocr_operator.ocrservice.rollout import verdict as V
from ocr_operator.runtime.jobs import Jobs

from .helpers import GateKube, owner, parsed, reconcile

NOW = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.timezone.utc)
STARTED = "2026-12-02T11:59:00.000000Z"
GATE = {"qualityGate": {"goldenPages": {"configMapName": "golden"}, "maxPageDistance": 0.2}}
GOLDEN = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "golden"},
          "binaryData": {"a.png": base64.b64encode(b"page-a").decode()}}


def revision(body) -> tuple[str, dict]:
    desired = render_all(body, parsed(body))
    return desired.revision, desired


DEPLOYMENT_UID = "deployment-uid"
# The Deployment controller's ReplicaSet: the rollout counts only the pods it controls.
REPLICASET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {
    "name": "ocr-5d8f", "namespace": "team-a", "uid": "rs-uid", "labels": naming.labels("ocr"),
    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "ocr", "uid": DEPLOYMENT_UID,
                         "controller": True}]}}


def pod(name, rev, *, ready=False, awaiting=False, ip="10.0.0.1"):
    """A pod of the Deployment's ReplicaSet (REPLICASET)."""
    owner_ref = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "ocr-5d8f", "uid": "rs-uid", "controller": True}
    conditions = [{"type": "ContainersReady", "status": "True" if ready or awaiting else "False"},
                  {"type": "Ready", "status": "True" if ready else "False",
                   "reason": "ReadinessGatesNotReady" if awaiting else None}]
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "creationTimestamp": "2026-12-02T11:59:30Z",
                                        "ownerReferences": [owner_ref],
                                        "labels": {**naming.selector_labels("ocr"), naming.REVISION_KEY: rev}},
            "status": {"phase": "Running", "podIP": ip, "conditions": conditions}}


def serving(old_body, new_body, *, golden=GOLDEN, phase="Healthy", extra=()):
    """The API with revision A (old_body) serving on one Ready pod, and the OcrService now asking for new_body."""
    a, desired_a = revision(old_body)
    history = revisions.History().record(a, desired_a.pod_template)
    deploy = copy.deepcopy(desired_a.objects["Deployment"])
    deploy["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    deploy["metadata"].update(generation=1, uid=DEPLOYMENT_UID)
    objects = {("Deployment", "ocr"): deploy, ("ReplicaSet", "ocr-5d8f"): REPLICASET, ("ConfigMap", "ocr-revisions"): revisions.render_history(old_body, history),
               ("Pod", "a-1"): pod("a-1", a, ready=True)}
    if golden is not None:
        objects[("ConfigMap", "golden")] = golden
    for obj in extra:
        objects[(obj["kind"], obj["metadata"]["name"])] = obj
    status = {"rollout": {"currentRevision": a, "lastGoodRevision": a, "phase": "Healthy", "startedAt": STARTED}}
    new_body = {**new_body, "status": status}
    return GateKube(objects), new_body, a


def condition(kube, type_):
    return next((c for c in kube.status["conditions"] if c["type"] == type_), None)


def run(kube, body, jobs=None):
    return asyncio.run(reconcile(kube, body, now=NOW, jobs=jobs))


def test_missing_golden_pages_hold_a_new_revision_back_with_a_condition_naming_the_field():
    kube, body, a = serving(owner({"rollout": GATE}), owner({"rollout": GATE, "env": [{"name": "X", "value": "1"}]}),
                            golden=None)
    result = run(kube, body)
    assert kube.objects[("Deployment", "ocr")]["metadata"]["annotations"][naming.REVISION_KEY] == a
    held = condition(kube, "QualityGate")
    assert (held["status"], held["reason"]) == ("False", PG.PAGES_MISSING)
    assert "spec.rollout.qualityGate.goldenPages.configMapName: ConfigMap golden not found" in held["message"]
    assert condition(kube, "Progressing")["reason"] == PG.PAGES_MISSING
    assert ("Warning", PG.PAGES_MISSING, held["message"]) in result.events


def test_a_first_revision_with_missing_golden_pages_creates_no_deployment():
    kube = GateKube()
    run(kube, owner({"rollout": GATE}))
    assert ("Deployment", "ocr") not in kube.objects
    assert condition(kube, "QualityGate")["reason"] == PG.PAGES_MISSING


def rolling_out(result_texts, baseline_text="hello world"):
    """Revision B in its gate attempt, its pod held back by the readiness gate, and the runner
    holding a finished gate job on that pod whose page answered `result_texts`."""
    old, new = owner({"rollout": GATE}), owner({"rollout": GATE, "env": [{"name": "X", "value": "1"}]})
    b, _ = revision(new)
    pages = PG.read_pages(GOLDEN, "golden", settings="maxNewTokens=512")  # the gate's default
    a, _ = revision(old)
    records = V.Records(V.Recording(a, pages.digest, (V.Output.of("a.png", baseline_text, 3),)))
    cm = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": naming.metadata(old, naming.quality_name("ocr")), "data": V.records_data(records)}
    kube, body, a = serving(old, new, extra=[cm, pod("b-1", b, awaiting=True, ip="10.0.0.2")])
    body["status"]["rollout"] = {"currentRevision": b, "lastGoodRevision": a, "phase": "Progressing",
                                 "startedAt": STARTED}
    jobs = Jobs(lambda key: None)
    job = G.Job(G.GATE, b, "b-1", "10.0.0.2", STARTED, pages.digest)
    jobs.results[("team-a", "ocr")] = (job.key, G.Result(job, (V.Output.of("a.png", result_texts, 3),), None, 1.5))
    return kube, body, jobs, a, b


def test_a_gate_verdict_worse_than_the_last_good_revision_rolls_back_with_quality_regression():
    kube, body, jobs, a, b = rolling_out("xxxxx xxxxx")
    result = run(kube, body, jobs)
    assert kube.status["failedReason"] == "QualityRegression" and kube.status["failedRevision"] == b
    assert kube.status["failedMessage"].startswith("page a.png: distance")
    assert "> maxPageDistance 0.2" in kube.status["failedMessage"]
    assert kube.objects[("Deployment", "ocr")]["metadata"]["annotations"][naming.REVISION_KEY] == a
    assert [e[1] for e in result.events if e[0] == "Warning"] == ["RolledBack"]
    assert kube.pod_patches == [] and jobs.result(("team-a", "ocr")) is None


def test_a_passing_gate_verdict_admits_the_pod_and_records_its_outputs_and_distances():
    kube, body, jobs, a, b = rolling_out("hello world")
    result = run(kube, body, jobs)
    assert [name for name, _ in kube.pod_patches] == ["b-1"]
    assert kube.pod_patches[0][1]["status"]["conditions"][0]["type"] == naming.GATE_CONDITION
    assert kube.status["qualityGate"]["phase"] == "Passed" and kube.status["qualityGate"]["meanDistance"] == 0.0
    assert condition(kube, "QualityGate")["status"] == "True"
    records = V.parse_records(kube.objects[("ConfigMap", "ocr-quality")])
    assert records.candidate.revision == b and records.baseline.revision == a
    assert any(e[1] == "QualityGatePassed" for e in result.events)


def test_without_a_gate_no_golden_pages_are_read_and_no_quality_configmap_is_written():
    kube, body, _ = serving(owner(), owner({"env": [{"name": "X", "value": "1"}]}))
    run(kube, body)
    assert not [c for c in kube.calls if c[2] in ("golden", "ocr-quality") and c[0] != "get"]
    assert ("get", "ConfigMap", "golden") not in kube.calls and "qualityGate" not in kube.status
    assert condition(kube, "QualityGate") is None


def test_a_revision_the_gate_failed_is_decided_once_and_its_pages_are_not_read_again():
    kube, body, jobs, a, b = rolling_out("xxxxx xxxxx")
    run(kube, body, jobs)
    del kube.objects[("Pod", "b-1")]  # the rollback removed it
    kube.calls.clear()
    again = run(kube, {**body, "status": kube.status}, jobs)
    assert kube.status["failedReason"] == "QualityRegression" and kube.status["rollout"]["phase"] == "RolledBack"
    assert ("get", "ConfigMap", "golden") not in kube.calls
    assert [e for e in again.events if e[1] in ("RolledBack", "QualityGatePassed")] == []
