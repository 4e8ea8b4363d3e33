"""Automatic rollback of a failed upgrade, on the real local control plane.

Every failure is injected the way it happens in a real cluster, through the pod template: the
spec's podLabels select one of the harness' kwok failure stages for the new pods
(never-ready, flap, crashloop, image-pull-error), resources.gpuResourceName asks for a kind of GPU
(a MIG profile) no node has (Unschedulable), a ResourceQuota with no room for the new pods makes
the API server refuse them (FailedCreate), and a short progressDeadlineSeconds with never-ready
pods makes the Deployment controller report ProgressDeadlineExceeded. Periods and deadlines are a
few seconds so each test takes seconds.

For each failure the tests check: the Deployment's pod template is back to
the last good revision; at no moment were fewer than the desired number of old pods Ready
(a watch samples the Ready old pods on every pod event); the status and a Warning Event name
the cause; the failed spec is not retried. The time from the first failure signal to the
rollback landing in the Deployment is printed (bench/rollback_bench.py repeats it for p50/p95).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import require_local
from localcluster.rollout_watch import RolloutWatch
from localcluster.waiting import wait_for

pytestmark = [pytest.mark.e2e]

NAME = "ocr"
REPLICAS = 2
SIMULATE = "causalflow.dev/simulate"
IMAGE = "registry.invalid/causalflow/ocr-server:1.0.0"
OCRS_API = "ocr.causalflow.dev/v1alpha1"

# startup budget = 3 + 2 x 1 = 5 s; settle 3 s; unschedulable grace 3 s.
FAST = {
    "healthCheck": {"periodSeconds": 1, "failureThreshold": 2},
    "modelLoadTimeoutSeconds": 3,
    "progressDeadlineSeconds": 30,
    "settleSeconds": 3,
    "unschedulableGraceSeconds": 3,
    "maxRestarts": 3,
}


def policy_of(rollout: dict) -> dict[str, int]:
    return {
        "modelLoadTimeoutSeconds": rollout["modelLoadTimeoutSeconds"],
        "failureThreshold": rollout["healthCheck"]["failureThreshold"],
        "periodSeconds": rollout["healthCheck"]["periodSeconds"],
        "unschedulableGraceSeconds": rollout["unschedulableGraceSeconds"],
    }


def ocrservice(rollout: dict | None = None, **spec) -> dict:
    body = {
        "image": IMAGE,
        "replicas": REPLICAS,
        "resources": {"gpus": 1, "cpu": "100m", "memory": "256Mi"},
        "rollout": rollout or FAST,
        "terminationGracePeriodSeconds": 0,
    }
    body.update(spec)  # with autoscaling, replicas is the starting size, then the HPA's
    return {"apiVersion": OCRS_API, "kind": "OcrService", "metadata": {"name": NAME}, "spec": body}


class Service:
    """One OcrService in one namespace, read through kubectl."""

    def __init__(self, cluster, namespace: str) -> None:
        self.cluster, self.ns = cluster, namespace

    def create(self, manifest: dict) -> None:
        self.cluster.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(manifest))

    def patch(self, spec: dict) -> None:
        self.cluster.kubectl("patch", "ocrservice", NAME, "-n", self.ns, "--type", "merge",
                             "-p", json.dumps({"spec": spec}))

    def get(self) -> dict:
        return self.cluster.require_object("ocrservice", NAME, self.ns)

    def status(self) -> dict:
        return self.get().get("status") or {}

    def current_status(self) -> dict | None:
        """The status once the operator has handled the latest spec (observedGeneration), else None."""
        obj = self.get()
        status = obj.get("status") or {}
        return status if status.get("observedGeneration") == obj["metadata"]["generation"] else None

    def phase(self) -> str | None:
        return (self.status().get("rollout") or {}).get("phase")

    def condition(self, kind: str) -> dict:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == kind), {})

    def deployment(self) -> dict:
        return self.cluster.require_object("deployment", NAME, self.ns)

    def template_revision(self) -> str:
        return self.deployment()["spec"]["template"]["metadata"]["labels"]["ocr.causalflow.dev/revision"]

    def events(self, reason: str) -> list[dict]:
        return self.cluster.list_objects("events", self.ns, fields=f"involvedObject.kind=OcrService,reason={reason}")

    def wait_phase(self, phase: str, timeout: float = 60) -> dict:
        def reached():
            s = self.current_status()
            return s if s and (s.get("rollout") or {}).get("phase") == phase else None
        return wait_for(reached, timeout=timeout, interval=0.25,
                        message=f"rollout phase {phase} (now {self.phase()!r}: {self.status().get('failedMessage')})")

    def wait_healthy(self, timeout: float = 60) -> str:
        """Wait until the current spec's revision is the last good one; return it."""
        def good():
            s = self.current_status() or {}
            rollout = s.get("rollout") or {}
            if rollout.get("phase") == "Healthy" and s.get("desiredRevision") == s.get("lastGoodRevision"):
                return s["lastGoodRevision"]
            return None
        return wait_for(good, timeout=timeout, interval=0.25, message="the desired revision to become last good")


@pytest.fixture
def svc(cluster, namespace, ocr_operator):
    require_local(cluster)
    return Service(cluster, namespace)


def gpus_for_the_replicas_only(svc: Service) -> None:
    """A ResourceQuota of exactly REPLICAS GPUs in the namespace, taken up by the quota controller:
    room for the service's pods of 1 GPU, none for one more."""
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "gpus"},
             "spec": {"hard": {"requests.nvidia.com/gpu": str(REPLICAS)}}}
    svc.cluster.kubectl("apply", "-n", svc.ns, "-f", "-", input=json.dumps(quota))
    wait_for(lambda: (svc.cluster.require_object("resourcequota", "gpus", svc.ns).get("status") or {}).get("hard"),
             timeout=30, message="the quota controller to take the quota up")


def start_good(svc: Service, rollout: dict | None = None) -> str:
    svc.create(ocrservice(rollout))
    good = svc.wait_healthy(timeout=90)
    wait_for(lambda: svc.deployment()["status"].get("readyReplicas") == REPLICAS, timeout=30,
             message=f"{REPLICAS} Ready pods of the good revision")
    return good


def assert_rolled_back(svc: Service, watch: RolloutWatch, good: str, reason: str, since: float,
                       rollout: dict, note: str = "") -> dict:
    status = svc.wait_phase("RolledBack", timeout=60)
    failed = status["failedRevision"]
    assert failed != good
    assert status["failedReason"] == reason, status
    if reason == "FailedCreate":  # no pod exists: the Deployment's refusal, quoting the API server
        message = status["failedMessage"]
        assert message.startswith(f"the Deployment cannot create pods of revision {failed}") and "is forbidden" in message, status
    elif reason != "ProgressDeadlineExceeded":  # the Deployment's verdict names no pod
        assert status["failedMessage"].startswith(f"pod {NAME}-"), status["failedMessage"]
    assert status["lastGoodRevision"] == good and status["currentRevision"] == good
    # the Deployment runs the last good pod template again
    assert svc.template_revision() == good
    applied = wait_for(lambda: watch.rollback_applied(failed, good), timeout=10,
                       message="the watch to see the template go back to the good revision")
    # the status and a Warning Event name the cause
    degraded = svc.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "RolledBack"
    assert reason in degraded["message"] and failed in degraded["message"]
    events = wait_for(lambda: svc.events("RolledBack"), timeout=10, message="a RolledBack Event")
    assert events[0]["type"] == "Warning" and reason in events[0]["message"]
    # old pods kept serving throughout
    assert watch.min_ready(good, since=since) >= REPLICAS, watch.ready_samples[-20:]
    signal = watch.failure_signal(failed, reason, policy_of(rollout))
    assert signal is not None, f"no {reason} signal seen for revision {failed}"
    print(f"\n{reason}: failure signal -> rollback applied in {applied - signal:.3f}s{note}")
    return status


def assert_not_retried(svc: Service, watch: RolloutWatch, status: dict, wait: float = 4.0) -> None:
    """For longer than every deadline in FAST, the failed spec stays rolled back."""
    time.sleep(wait)
    later = svc.status()
    assert later["rollout"] == status["rollout"]
    assert svc.template_revision() == status["lastGoodRevision"]
    assert [rev for _, rev in watch.template_times()].count(status["failedRevision"]) == 1
    assert len(svc.events("RolledBack")) == 1


# --------------------------------------------------------------------------- 1. good upgrade


def test_a_good_upgrade_becomes_the_last_good_revision_without_a_rollback(svc, kube):
    first = start_good(svc)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"image": IMAGE.replace("1.0.0", "1.1.0")})
        second = svc.wait_healthy()
        assert second != first
        assert svc.template_revision() == second
        wait_for(lambda: svc.deployment()["status"].get("updatedReplicas") == REPLICAS, timeout=30,
                 message="all pods on the new revision")
        status = svc.status()
        assert status.get("failedRevision") is None
        assert svc.condition("Degraded")["status"] == "False"
        assert svc.events("RolledBack") == []
        wait_for(lambda: svc.events("RolloutSucceeded"), timeout=10, message="a RolloutSucceeded Event")  # posted off the reconcile
        # old pods served until new ones were Ready: never fewer Ready pods than desired
        assert watch.min_ready(None, since=since) >= REPLICAS, watch.ready_samples[-20:]
        assert [rev for _, rev in watch.template_times()] == [first, second]


FAST_HPA = {"scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]},
            "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]}}


def test_an_hpa_scale_up_in_the_middle_of_a_rollout_is_not_a_failure(cluster, svc, kube):
    cluster.set_metric(svc.ns, "DCGM_FI_DEV_GPU_UTIL", 30)  # below the 50 % target: 2 replicas
    autoscaling = {"minReplicas": 2, "maxReplicas": 4, "targetGPUUtilization": 50, "behavior": FAST_HPA}
    svc.create(ocrservice(dict(FAST, settleSeconds=4), autoscaling=autoscaling))
    first = svc.wait_healthy(timeout=90)
    # The HPA reads the OcrService's scale subresource (after kube-controller-manager's discovery
    # has seen the CRD's): only then can its scale-up land inside the rollout below.
    wait_for(lambda: svc.condition("ScalingActive").get("status") == "True", timeout=60,
             message="the HPA reads the metric and the OcrService's scale")
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"image": IMAGE.replace("1.0.0", "1.2.0")})
        svc.wait_phase("Progressing", timeout=20)
        cluster.set_metric(svc.ns, "DCGM_FI_DEV_GPU_UTIL", 100)  # the HPA doubles the size mid-rollout
        wait_for(lambda: svc.deployment()["spec"]["replicas"] == 4, timeout=60, message="the HPA scaled to 4")
        status = svc.status()  # on failure, the rollout record and conditions say why it ended
        assert (status.get("rollout") or {}).get("phase") == "Progressing", (
            "the scale-up must land while the rollout is still in progress", status.get("rollout"),
            status.get("conditions"))
        second = svc.wait_healthy(timeout=120)
        assert second != first
        status = svc.status()
        assert status.get("failedRevision") is None and status["lastGoodRevision"] == second
        assert svc.template_revision() == second
        assert svc.events("RolledBack") == [] and svc.events("RolloutFailed") == []
        assert [rev for _, rev in watch.template_times()] == [first, second]
        assert watch.min_ready(None, since=since) >= 2


# --------------------------------------------------------------------------- 2. every failure kind

FAILURES = [
    # (test id, spec change, reason the state machine reports, rollout settings)
    ("never-ready", {"podLabels": {SIMULATE: "never-ready"}}, "ReadinessTimeout", FAST),
    ("ready-then-failing", {"podLabels": {SIMULATE: "flap"}}, "ReadinessLost",
     dict(FAST, settleSeconds=8)),  # kwok drops readiness ~5 s after Ready: inside the settle period
    ("crash-loop", {"podLabels": {SIMULATE: "crashloop"}}, "CrashLoopBackOff", FAST),
    ("image-pull-error", {"podLabels": {SIMULATE: "image-pull-error"}}, "ImagePullBackOff", FAST),
    ("oom-killed", {"podLabels": {SIMULATE: "oom-killed"}}, "OOMKilled", FAST),
    ("create-config-error", {"podLabels": {SIMULATE: "create-config-error"}}, "CreateContainerConfigError", FAST),
    # a GPU kind (a MIG profile) no node offers: the new pods never schedule
    ("unschedulable", {"resources": {"gpuResourceName": "nvidia.com/mig-3g.40gb"}}, "Unschedulable", FAST),
    # progress deadline 4 s fires before the never-ready pods' startup budget of 3 + 3 x 2 = 9 s
    ("progress-deadline", {"podLabels": {SIMULATE: "never-ready"}}, "ProgressDeadlineExceeded",
     dict(FAST, progressDeadlineSeconds=4, healthCheck={"periodSeconds": 2, "failureThreshold": 3})),
]


@pytest.mark.parametrize("change,reason,rollout", [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES])
def test_a_failing_upgrade_is_rolled_back_without_downtime_and_not_retried(svc, kube, change, reason, rollout):
    good = start_good(svc, rollout)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch(change)
        status = assert_rolled_back(svc, watch, good, reason, since, rollout)
        assert_not_retried(svc, watch, status)
        assert watch.min_ready(good, since=since) >= REPLICAS


def test_an_upgrade_the_namespaces_quota_has_no_room_for_is_rolled_back_quoting_the_quota(svc, kube):
    """2 pods of 1 GPU under a ResourceQuota of exactly 2 GPUs: the default rollout (maxSurge 1,
    maxUnavailable 0) needs a third GPU for its surge pod. The API server refuses that pod, and the
    failure quotes its refusal (the next test is the way through: maxSurge 0, maxUnavailable 1)."""
    gpus_for_the_replicas_only(svc)
    good = start_good(svc)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"image": IMAGE.replace("1.0.0", "1.1.0")})
        status = assert_rolled_back(svc, watch, good, "FailedCreate", since, FAST)
        assert "exceeded quota: gpus" in status["failedMessage"], status["failedMessage"]


def test_an_upgrade_with_max_unavailable_goes_through_a_quota_with_no_room_for_one_more_pod(svc, kube):
    """2 pods of 1 GPU under a quota of exactly 2 GPUs: no surge pod fits. With maxSurge 0 and
    maxUnavailable 1 each old pod stops first and frees its GPU for its replacement: the upgrade
    becomes the last good revision, one pod down at most meanwhile. (The grace is long enough for
    the ReplicaSet to retry a create that races the old pod's release of the quota.)"""
    gpus_for_the_replicas_only(svc)
    rollout = {**FAST, "maxSurge": 0, "maxUnavailable": 1, "unschedulableGraceSeconds": 60}
    good = start_good(svc, rollout)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"image": IMAGE.replace("1.0.0", "1.1.0")})
        upgraded = svc.wait_healthy(timeout=90)
        assert upgraded != good and svc.template_revision() == upgraded
        wait_for(lambda: svc.deployment()["status"].get("updatedReplicas") == REPLICAS
                 and svc.deployment()["status"].get("readyReplicas") == REPLICAS, timeout=30,
                 message="all pods on the new revision")
        assert svc.status().get("failedRevision") is None and svc.events("RolledBack") == []
        assert svc.deployment()["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
        assert watch.min_ready(None, since=since) >= REPLICAS - 1, watch.ready_samples[-20:]


# --------------------------------------------------------------------------- 3. a new attempt


def test_a_further_spec_change_after_a_rollback_is_attempted_and_succeeds(svc, kube):
    good = start_good(svc)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"podLabels": {SIMULATE: "image-pull-error"}})
        failed = assert_rolled_back(svc, watch, good, "ImagePullBackOff", since, FAST)["failedRevision"]
        svc.patch({"podLabels": None, "image": IMAGE.replace("1.0.0", "1.0.1")})
        fixed = svc.wait_healthy()
        assert fixed not in (good, failed)
        assert svc.template_revision() == fixed
        status = svc.status()
        assert status.get("failedRevision") is None
        assert svc.condition("Degraded")["status"] == "False"
        assert [rev for _, rev in watch.template_times()] == [good, failed, good, fixed]



def test_an_upgrade_inside_the_settle_period_of_a_ready_revision_rolls_back_to_it(svc, kube):
    """Scripts apply twice in a row: the first revision is Ready but not settled (60 s) when the
    second, failing one arrives. It was Ready at the change, so it is the rollback target."""
    rollout = dict(FAST, settleSeconds=60)
    svc.create(ocrservice(rollout))
    first = wait_for(lambda: (svc.status().get("rollout") or {}).get("readySince") and svc.status()["rollout"]["currentRevision"],
                     timeout=60, interval=0.25, message="every pod of the first revision Ready (readySince)")
    assert svc.phase() == "Progressing" and svc.status().get("lastGoodRevision") is None
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"podLabels": {SIMULATE: "crashloop"}})
        status = assert_rolled_back(svc, watch, first, "CrashLoopBackOff", since, rollout)
        assert status["lastGoodRevision"] == first
        wait_for(lambda: any("when the spec changed" in e["message"] for e in svc.events("RolloutSucceeded")), timeout=10,
                 message="a RolloutSucceeded Event naming the spec change")


# --------------------------------------------------------------------------- autoRollback off, first deploy


def test_with_auto_rollback_off_the_failed_upgrade_stays_in_place_and_is_reported(svc, kube):
    good = start_good(svc, dict(FAST, autoRollback=False))
    svc.patch({"podLabels": {SIMULATE: "crashloop"}})
    status = svc.wait_phase("Failed")
    assert status["failedReason"] == "CrashLoopBackOff"
    assert status["lastGoodRevision"] == good
    assert svc.template_revision() == status["failedRevision"] != good
    degraded = svc.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "RolloutFailed"
    assert "CrashLoopBackOff" in degraded["message"]
    assert wait_for(lambda: svc.events("RolloutFailed"), timeout=10, message="a RolloutFailed Event")
    time.sleep(3)
    assert svc.template_revision() == status["failedRevision"]
    assert svc.events("RolledBack") == []


def test_a_failing_first_deploy_is_reported_as_no_good_revision_and_does_not_loop(svc, kube):
    svc.create(ocrservice(podLabels={SIMULATE: "image-pull-error"}))
    status = svc.wait_phase("NoGoodRevision")
    assert status["failedReason"] == "ImagePullBackOff"
    assert status.get("lastGoodRevision") is None
    degraded = svc.condition("Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "NoGoodRevision"
    assert "no good revision" in degraded["message"]
    assert wait_for(lambda: svc.events("NoGoodRevision"), timeout=10, message="a NoGoodRevision Event")
    generation = svc.deployment()["metadata"]["generation"]
    time.sleep(4)  # nothing more happens: no re-apply, no second Event
    assert svc.deployment()["metadata"]["generation"] == generation  # nothing re-applied
    assert svc.status()["rollout"] == status["rollout"]
    assert len(svc.events("NoGoodRevision")) == 1


# --------------------------------------------------------------------------- 4. restart safety


def test_an_operator_killed_in_the_middle_of_a_failing_rollout_still_rolls_it_back(svc, kube, ocr_operator):
    # A startup budget of 8 + 2 x 1 = 10 s leaves time to stop the operator mid-rollout.
    rollout = dict(FAST, modelLoadTimeoutSeconds=8)
    good = start_good(svc, rollout)
    with RolloutWatch(kube, svc.ns, NAME) as watch:
        since = time.monotonic()
        svc.patch({"podLabels": {SIMULATE: "never-ready"}})
        progressing = svc.wait_phase("Progressing", timeout=20)
        bad = progressing["rollout"]["currentRevision"]
        assert bad != good
        wait_for(lambda: svc.template_revision() == bad, timeout=10, message="the new template applied")
        ocr_operator.kill()  # SIGKILL: nothing is saved on the way out
        time.sleep(12)  # past the startup budget while no operator runs
        assert svc.template_revision() == bad
        ocr_operator.start()
        status = assert_rolled_back(svc, watch, good, "ReadinessTimeout", since, rollout,
                                    note=" (the operator was down when the deadline passed)")
        assert status["rollout"]["startedAt"] == progressing["rollout"]["startedAt"]
