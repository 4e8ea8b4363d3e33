"""Autoscaling: the HPA scales the OcrService through its scale subresource, the operator carries
spec.replicas to the Deployment, and nobody else may change that size while autoscaling is on."""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import require_local
from tests.e2e.operator_fixtures import FIELD_MANAGER, ocrservice
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

FAST_HPA = {"scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]},
            "scaleDown": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 4, "periodSeconds": 1}]}}
HPA_USERS = ("system:kube-controller-manager", "system:serviceaccount:kube-system:horizontal-pod-autoscaler")


def owns_replicas(dep: dict, manager: str) -> bool:
    return any(m["manager"] == manager and "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})
               for m in dep["metadata"].get("managedFields") or ())


def scale_of(ocr, name: str) -> dict:
    """GET of the OcrService's scale subresource, as the HPA and `kubectl scale` read it."""
    return json.loads(ocr.cluster.kubectl("get", "--raw", f"/apis/ocr.causalflow.dev/v1alpha1/namespaces/{ocr.ns}"
                                          f"/ocrservices/{name}/scale").stdout)


def test_switching_autoscaling_on_and_off_keeps_the_size_and_the_scale_subresource(ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=2))
    ocr.wait_ready("web")
    assert ocr.get("hpa", "web") is None
    assert ocr.get("deployment", "web")["spec"]["replicas"] == 2
    scale = scale_of(ocr, "web")
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (2, 2)
    assert scale["status"]["selector"] == "app.kubernetes.io/name=causalflow-ocr,app.kubernetes.io/instance=web"

    # On: the HPA appears and targets the OcrService; the 2 pods stay (spec.replicas is its start).
    ocr.patch("ocrs", "web", {"spec": {"autoscaling": {"minReplicas": 1, "maxReplicas": 4}}})
    hpa = wait_for(lambda: ocr.get("hpa", "web"), timeout=15, message="HPA created")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
                                             "name": "web"}
    ocr.wait_ready("web")
    assert ocr.get("deployment", "web")["spec"]["replicas"] == 2
    assert scale_of(ocr, "web")["spec"]["replicas"] == 2  # GET /scale works with autoscaling on

    # Off, with a new fixed size in the same write: allowed, the HPA goes, the size is the user's.
    ocr.patch("ocrs", "web", {"spec": {"autoscaling": None, "replicas": 3}})
    wait_for(lambda: ocr.get("hpa", "web") is None, timeout=15, message="HPA deleted")
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["replicas"] == 3, timeout=15, message="replicas 3")
    assert owns_replicas(ocr.get("deployment", "web"), FIELD_MANAGER)
    assert ocr.wait_ready("web")["status"]["readyReplicas"] == 3
    ocr.cluster.kubectl("scale", "ocrs", "web", "-n", ocr.ns, "--replicas=1")  # fixed size: kubectl scale applies
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["replicas"] == 1, timeout=15, message="scaled to 1")


def test_the_hpa_scales_the_ocrservice_on_the_gpu_metric_and_the_deployment_follows(cluster, ocr, ocr_operator):
    require_local(cluster)
    cluster.set_metric(ocr.ns, "DCGM_FI_DEV_GPU_UTIL", 30)
    ocr.apply(ocrservice("web", autoscaling={"minReplicas": 1, "maxReplicas": 3, "targetGPUUtilization": 50,
                                              "behavior": FAST_HPA}))
    ocr.wait_ready("web")
    wait_for(lambda: ocr.condition(ocr.get("ocrs", "web"), "ScalingActive").get("status") == "True", timeout=30,
             message="ScalingActive=True")
    since = time.time()

    cluster.set_metric(ocr.ns, "DCGM_FI_DEV_GPU_UTIL", 100)
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["replicas"] == 3, timeout=60, message="HPA scaled to 3")
    obj = wait_for(lambda: (lambda o: o if o["status"].get("readyReplicas") == 3 else None)(ocr.wait_ready("web")),
                   timeout=60, message="3 Ready replicas reported")
    assert obj["spec"]["replicas"] == 3
    assert obj["status"]["gpuUtilization"].endswith("/50")
    scale = scale_of(ocr, "web")  # the HPA's view
    assert (scale["spec"]["replicas"], scale["status"]["replicas"]) == (3, 3)
    assert ocr.get("hpa", "web")["status"]["desiredReplicas"] == 3
    # The HPA (it always writes a scale subresource) scaled the OcrService, never the Deployment:
    # the operator did. Here kube-controller-manager runs every controller as one user, so its
    # Deployment controller's own writes (status, revision annotation) are in the log too.
    by_kcm = [e for e in ocr.audit_writes(since, user=HPA_USERS[0]) if e["user"]["username"] in HPA_USERS]
    scales = {e["objectRef"]["resource"] for e in by_kcm if e["objectRef"].get("subresource") == "scale"}
    assert scales == {"ocrservices"}, scales

    time.sleep(8)  # more HPA syncs and operator reconciles: nothing may move the size back
    settled = time.time()
    gen = ocr.get("deployment", "web")["metadata"]["generation"]
    time.sleep(4)
    dep = ocr.get("deployment", "web")
    assert dep["spec"]["replicas"] == 3 and dep["metadata"]["generation"] == gen
    writes = [e for e in ocr.audit_writes(settled) if e.get("objectRef", {}).get("resource") == "deployments"]
    assert writes == [], [(e["verb"], e["objectRef"]) for e in writes]
    assert ocr.get("ocrs", "web")["status"]["rollout"]["phase"] == "Healthy", "HPA scale-up must not start a rollout"


def test_scaling_active_reports_the_hpa_reason_when_the_metric_is_missing(cluster, ocr, ocr_operator):
    require_local(cluster)
    ocr.apply(ocrservice("web", autoscaling={"maxReplicas": 2, "metric": {"name": "ocr_queue_depth",
                                                                          "targetAverageValue": "4"}}))
    cond = wait_for(lambda: (lambda c: c if c.get("status") == "False" else None)(
        ocr.condition(ocr.get("ocrs", "web"), "ScalingActive")), timeout=45, message="ScalingActive=False")
    assert cond["reason"] == "FailedGetPodsMetric", cond
    assert "ocr_queue_depth" in cond["message"]
    assert ocr.wait_ready("web")  # a missing metric does not make the service unready


def test_a_schedule_window_with_min_replicas_zero_scales_to_zero_and_its_end_restores_min_replicas(ocr, ocr_operator):
    """The window opens a minute ago and ends at the next minute boundary (two if that is
    under 15 s away): inside it no HPA and 0 pods; within a minute after it, HPA and pods back."""
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    end = (now + dt.timedelta(minutes=1 if now.second < 45 else 2)).replace(second=0, microsecond=0)
    window = {"name": "nights", "start": (now - dt.timedelta(minutes=1)).strftime("%H:%M"),
              "end": end.strftime("%H:%M"), "minReplicas": 0}
    ocr.apply(ocrservice("web", autoscaling={"minReplicas": 2, "maxReplicas": 3, "schedules": [window]}))
    obj = wait_for(lambda: (lambda o: o if o and o.get("status", {}).get("activeSchedule") == "nights"
                            and ocr.condition(o, "Ready").get("reason") == "ScaledToZero" else None)(ocr.get("ocrs", "web")),
                   timeout=30, message="scaled to zero by the window")
    assert ocr.get("hpa", "web") is None
    assert ocr.get("deployment", "web")["spec"]["replicas"] == 0
    assert "nights" in ocr.condition(obj, "ScalingActive")["message"]
    assert not [e for e in ocr.events("web") if e["type"] == "Warning"], ocr.events("web")

    wait = (end - dt.datetime.now(dt.timezone.utc)).total_seconds()
    hpa = wait_for(lambda: ocr.get("hpa", "web"), timeout=wait + 60, interval=1, message="HPA back after the window")
    assert hpa["spec"]["minReplicas"] == 2
    restored = dt.datetime.now(dt.timezone.utc)
    assert (restored - end).total_seconds() < 60, f"restored {restored - end} after the window"
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["replicas"] >= 2, timeout=15,
             message="minReplicas pods asked for again")
    # Ready again for the pods, not the window: the HPA and the Deployment are written before the
    # status, so a read between them still finds the window's Ready=True (ScaledToZero).
    obj = wait_for(lambda: (o := ocr.ready("web")) and ocr.condition(o, "Ready").get("reason") == "AllReplicasReady" and o,
                   timeout=60, message="Ready with minReplicas pods after the window")
    assert "activeSchedule" not in obj["status"]


def test_kubectl_scale_on_an_autoscaled_service_is_refused_with_a_clear_message(ocr, ocr_operator):
    ocr.apply(ocrservice("web", autoscaling={"minReplicas": 1, "maxReplicas": 3}))
    ocr.wait_ready("web")
    before = scale_of(ocr, "web")["spec"]["replicas"]
    for command in (("scale", "ocrs", "web", "--replicas=3"),
                    ("patch", "ocrs", "web", "--type=merge", "-p", '{"spec": {"replicas": 3}}')):
        proc = ocr.cluster.kubectl(*command, "-n", ocr.ns, check=False)
        assert proc.returncode != 0, command
        assert "ocrservices-replicas.ocr.causalflow.dev" in proc.stderr, proc.stderr
        assert "set by its HorizontalPodAutoscaler" in proc.stderr and "minReplicas/maxReplicas (now 1/3)" in proc.stderr
    assert ocr.get("ocrs", "web")["spec"]["replicas"] == before == 1
    assert ocr.get("deployment", "web")["spec"]["replicas"] == 1
    # Every other edit of an autoscaled OcrService still goes through.
    ocr.patch("ocrs", "web", {"spec": {"autoscaling": {"maxReplicas": 4}}})
    wait_for(lambda: ocr.get("hpa", "web")["spec"]["maxReplicas"] == 4, timeout=15, message="maxReplicas 4")
