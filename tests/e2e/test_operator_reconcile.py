"""`kubectl apply -f ocrservice.yaml` produces the GPU deployment and keeps it in shape.

The real operator process runs against the local control plane; pods run on kwok's fake GPU
nodes. Each test uses its own namespace and its own operator process.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.e2e.operator_fixtures import FIELD_MANAGER, ocrservice
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

CHILDREN = (("deployment", "web"), ("service", "web"), ("configmap", "web-config"), ("hpa", "web"),
            ("pdb", "web"), ("configmap", "web-revisions"))


def ready_pods(ocr, name):
    return [p for p in ocr.list("pods", f"app.kubernetes.io/instance={name}")
            if ocr.condition(p, "Ready").get("status") == "True" and not p["metadata"].get("deletionTimestamp")]


def test_an_ocrservice_with_default_autoscaling_gets_its_children_and_becomes_ready(cluster, ocr, ocr_operator):
    ocr.apply(ocrservice("web", autoscaling={}))
    obj = ocr.wait_ready("web")

    dep = ocr.get("deployment", "web")
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1" and c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 10
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # one channel for the server configuration: the file, not env overrides beside it
    assert {"name": "CONFIG_FILE", "value": "/etc/ocr/config.yaml"} in c["env"]
    assert not {"INPUT_SIZE", "PORT", "BATCH_SIZE", "MODEL_NAME"} & {e["name"] for e in c["env"]}
    assert dep["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert dep["metadata"]["labels"]["app.kubernetes.io/managed-by"] == FIELD_MANAGER
    replicas_owners = [m["manager"] for m in dep["metadata"]["managedFields"]
                       if "f:replicas" in (m.get("fieldsV1") or {}).get("f:spec", {})]
    assert replicas_owners == [FIELD_MANAGER], "the operator sizes the Deployment (the HPA scales the OcrService)"

    svc = ocr.get("service", "web")
    assert svc["spec"]["ports"][0]["port"] == 8080
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "causalflow-ocr", "app.kubernetes.io/instance": "web"}
    cfg = yaml.safe_load(ocr.get("configmap", "web-config")["data"]["config.yaml"])
    assert cfg["model"]["max_visual_tokens"] == 1024 and cfg["runtime"]["batch_size"] == 8
    hpa = ocr.get("hpa", "web")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "DCGM_FI_DEV_GPU_UTIL"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 3)
    assert ocr.get("pdb", "web")["spec"]["maxUnavailable"] == 1

    pods = wait_for(lambda: ready_pods(ocr, "web"), timeout=30, message="a Ready pod")
    assert pods[0]["spec"]["nodeName"].startswith("gpu-node-")

    st = obj["status"]
    gen = obj["metadata"]["generation"]
    for type_ in ("Ready", "Available", "Progressing", "Degraded", "ScalingActive"):
        cond = ocr.condition(obj, type_)
        assert cond, f"{type_} missing"
        assert cond["reason"] and cond["message"] and cond["observedGeneration"] == gen, cond
    assert ocr.condition(obj, "Available")["status"] == "True"
    assert ocr.condition(obj, "Degraded")["status"] == "False"
    assert st["url"] == f"http://web.{ocr.ns}.svc:8080"
    assert st["currentRevision"] == dep["metadata"]["annotations"]["ocr.causalflow.dev/revision"]

    table = cluster.kubectl("get", "ocrs", "web", "-n", ocr.ns).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:6] == ["NAME", "READY", "REASON", "REPLICAS", "REVISION", "AGE"]
    assert row[1:5] == ["True", "AllReplicasReady", "1/1", st["currentRevision"]]
    wide = cluster.kubectl("get", "ocrs", "web", "-n", ocr.ns, "-o", "wide").stdout.splitlines()
    assert "GPU-UTIL" in wide[0] and "deepseek-ai/DeepSeek-OCR-2" in wide[1]

    # What the scale subresource reads (statusReplicasPath, labelSelectorPath).
    assert st["replicas"] == 1
    assert st["selector"] == "app.kubernetes.io/name=causalflow-ocr,app.kubernetes.io/instance=web"
    # The first rollout tells its start and its success (after settleSeconds); the Ready
    # transition inside it is not told a second time.
    wait_for(lambda: {"RolloutStarted", "RolloutSucceeded"} <= {e["reason"] for e in ocr.events("web")},
             timeout=30, message="RolloutStarted and RolloutSucceeded events")
    reasons = [e["reason"] for e in ocr.events("web")]
    assert "Ready" not in reasons, reasons



def test_a_spread_by_node_puts_each_replica_on_its_own_gpu_node_counting_only_this_services_pods(ocr, ocr_operator):
    """spec.topologySpreadConstraints without a labelSelector: the API server accepts the pods as rendered
    (the OcrService's selector, matchLabelKeys pod-template-hash) and the scheduler spreads them."""
    by_node = {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}
    ocr.apply(ocrservice("spread", replicas=2, autoscaling={"enabled": False}, topologySpreadConstraints=[by_node]))
    pods = wait_for(lambda: found if len(found := ready_pods(ocr, "spread")) == 2 else None, timeout=60,
                    message="2 Ready pods")
    nodes = sorted(p["spec"]["nodeName"] for p in pods)
    assert len(set(nodes)) == 2 and all(n.startswith("gpu-node-") for n in nodes), nodes
    [constraint] = pods[0]["spec"]["topologySpreadConstraints"]
    assert constraint["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "causalflow-ocr",
                                                         "app.kubernetes.io/instance": "spread"}
    assert constraint["matchLabelKeys"] == ["pod-template-hash"]

def test_a_spec_change_rolls_out_a_new_revision(ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=2))
    first = ocr.wait_ready("web")["status"]["currentRevision"]
    wait_for(lambda: (ocr.get("ocrs", "web")["status"].get("lastGoodRevision") == first), timeout=30,
             message="first revision settled as last good")

    ocr.patch("ocrs", "web", {"spec": {"image": "registry.invalid/causalflow/ocr-server:1.1"}})
    obj = ocr.wait_ready("web")
    second = obj["status"]["currentRevision"]
    assert second != first
    assert obj["metadata"]["generation"] == 2 and obj["status"]["observedGeneration"] == 2
    dep = ocr.get("deployment", "web")
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":1.1")
    assert dep["spec"]["replicas"] == 2
    wait_for(lambda: {p["metadata"]["labels"]["ocr.causalflow.dev/revision"] for p in ready_pods(ocr, "web")} == {second},
             timeout=30, message="only pods of the new revision")
    assert all(p["spec"]["containers"][0]["image"].endswith(":1.1") for p in ready_pods(ocr, "web"))
    assert len(ready_pods(ocr, "web")) == 2
    wait_for(lambda: ocr.get("ocrs", "web")["status"].get("lastGoodRevision") == second, timeout=30,
             message="new revision settled as last good")
    started = [e for e in ocr.events("web") if e["reason"] == "RolloutStarted"]
    assert any(second in e["message"] for e in started)


@pytest.mark.parametrize("kind, name", [("deployment", "web"), ("service", "web"), ("configmap", "web-config"),
                                        ("hpa", "web"), ("pdb", "web")])
def test_a_deleted_child_comes_back_within_seconds(ocr, ocr_operator, kind, name):
    ocr.apply(ocrservice("web", autoscaling={}))
    ocr.wait_ready("web")
    old_uid = ocr.get(kind, name)["metadata"]["uid"]
    ocr.delete(kind, name)
    back = wait_for(lambda: (lambda o: o if o and o["metadata"]["uid"] != old_uid else None)(ocr.get(kind, name)),
                    timeout=15, message=f"{kind}/{name} recreated")
    assert back["metadata"]["ownerReferences"][0]["name"] == "web"
    ocr.wait_ready("web", timeout=30)


def test_an_edited_child_is_put_back(ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=1))
    ocr.wait_ready("web")
    ocr.patch("deployment", "web", {"spec": {"template": {"spec": {"containers": [
        {"name": "server", "image": "someone/else:latest"}]}}}}, type_="strategic")
    ocr.patch("service", "web", {"spec": {"selector": {"app.kubernetes.io/instance": "someone-else"}}})
    ocr.patch("configmap", "web-config", {"data": {"config.yaml": "service: {port: 1}"}})
    wait_for(lambda: ocr.get("deployment", "web")["spec"]["template"]["spec"]["containers"][0]["image"]
             == "registry.invalid/causalflow/ocr-server:1.0", timeout=15, message="image restored")
    wait_for(lambda: ocr.get("service", "web")["spec"]["selector"]["app.kubernetes.io/instance"] == "web", timeout=15,
             message="service selector restored")
    wait_for(lambda: "max_visual_tokens" in ocr.get("configmap", "web-config")["data"]["config.yaml"], timeout=15,
             message="server config restored")
    ocr.wait_ready("web")


def test_deleting_the_ocrservice_garbage_collects_every_child(ocr, ocr_operator):
    ocr.apply(ocrservice("web", autoscaling={}, networkPolicy={"enabled": True}))
    ocr.wait_ready("web")
    assert all(ocr.get(k, n) is not None for k, n in CHILDREN + (("networkpolicy", "web"),))
    ocr.delete("ocrs", "web", wait=True)
    wait_for(lambda: all(ocr.get(k, n) is None for k, n in CHILDREN + (("networkpolicy", "web"),)), timeout=60,
             message="all children garbage-collected")
    wait_for(lambda: not ocr.list("pods", "app.kubernetes.io/instance=web"), timeout=60, message="pods gone")


def test_disabling_an_optional_child_removes_it(ocr, ocr_operator):
    ocr.apply(ocrservice("web", replicas=2, networkPolicy={"enabled": True}))
    ocr.wait_ready("web")
    assert ocr.get("networkpolicy", "web") and ocr.get("pdb", "web")
    ocr.patch("ocrs", "web", {"spec": {"replicas": 1, "networkPolicy": {"enabled": False}}})
    wait_for(lambda: ocr.get("networkpolicy", "web") is None and ocr.get("pdb", "web") is None, timeout=15,
             message="NetworkPolicy and PDB removed")
    assert ocr.wait_ready("web")["status"]["replicas"] == 1


def _by_other_manager(ocr, kind, name, ops):
    ocr.cluster.kubectl("patch", kind, name, "-n", ocr.ns, "--type", "json", "--field-manager", "someone-else",
                        "-p", json.dumps(ops))


def test_every_child_changed_by_another_field_manager_is_repaired(ocr, ocr_operator):
    """Keys of lists we own (a Service port, a NetworkPolicy port) and plain fields (HPA, PDB,
    probes), each changed by another field manager: the operator puts them back, no ApplyFailed."""
    ocr.apply(ocrservice("web", autoscaling={"minReplicas": 2, "maxReplicas": 3}, networkPolicy={"enabled": True}))
    ocr.wait_ready("web")
    _by_other_manager(ocr, "service", "web", [{"op": "replace", "path": "/spec/ports/0/port", "value": 9999}])
    _by_other_manager(ocr, "hpa", "web", [{"op": "replace", "path": "/spec/maxReplicas", "value": 7}])
    _by_other_manager(ocr, "pdb", "web", [{"op": "replace", "path": "/spec/maxUnavailable", "value": 0}])
    _by_other_manager(ocr, "networkpolicy", "web",
                      [{"op": "replace", "path": "/spec/ingress/0/ports/0/port", "value": 1234}])
    _by_other_manager(ocr, "deployment", "web", [{"op": "replace", "path": "/spec/template/spec/containers/0/readinessProbe/httpGet/path", "value": "/elsewhere"}])

    def repaired():
        svc, hpa, pdb = ocr.get("service", "web"), ocr.get("hpa", "web"), ocr.get("pdb", "web")
        np, dep = ocr.get("networkpolicy", "web"), ocr.get("deployment", "web")
        probe = dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
        return ([p["port"] for p in svc["spec"]["ports"]] == [8080] and hpa["spec"]["maxReplicas"] == 3
                and pdb["spec"]["maxUnavailable"] == 1 and probe == "/health/ready"
                and [p["port"] for p in np["spec"]["ingress"][0]["ports"]] == [8080])
    wait_for(repaired, timeout=20, message="every drifted field put back")
    obj = ocr.wait_ready("web")
    assert "ApplyFailed" not in {c.get("reason") for c in obj["status"]["conditions"]}


def test_a_users_service_with_a_childs_name_is_left_untouched_and_reported(ocr, ocr_operator):
    ocr.apply({"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "web", "labels": {"app": "legacy"}},
               "spec": {"selector": {"app": "legacy"}, "ports": [{"port": 80, "targetPort": 9000}]}})
    before = ocr.get("service", "web")
    ocr.apply(ocrservice("web", replicas=1))

    def reported():
        obj = ocr.get("ocrs", "web")
        return obj if ocr.condition(obj, "Degraded").get("reason") == "ChildConflict" else None

    obj = wait_for(reported, timeout=60, message="Degraded=True ChildConflict")
    assert ocr.condition(obj, "Degraded")["status"] == "True"
    assert "Service web" in ocr.condition(obj, "Degraded")["message"]
    assert (ocr.condition(obj, "Ready")["status"], ocr.condition(obj, "Ready")["reason"]) == ("False", "ChildConflict")
    wait_for(lambda: [e for e in ocr.events("web") if e["type"] == "Warning" and e["reason"] == "ChildConflict"
                      and "Service web" in e["message"]], timeout=30, message="a ChildConflict Warning event")
    assert ocr.get("deployment", "web") is not None  # the other children are created as usual

    after = ocr.get("service", "web")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # never written
    assert not after["metadata"].get("ownerReferences")
    assert "app.kubernetes.io/managed-by" not in (after["metadata"].get("labels") or {})
    assert after["spec"]["selector"] == {"app": "legacy"}
    assert [(p["port"], p["targetPort"]) for p in after["spec"]["ports"]] == [(80, 9000)]
