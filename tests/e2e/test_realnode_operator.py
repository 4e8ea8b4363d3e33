"""`helm install` of the chart with the operator image built from Dockerfile.operator, on the REAL node.

Node: the operator pod runs on `real-node-0` (chart values `nodeSelector` + `tolerations`); the
OcrService it reconciles has pods on the kwok nodes (what is tested here is the operator: its
container, its probe, its ServiceAccount's RBAC; the server's pods are the subject of
test_realnode_serving.py). The operator reaches the API server the in-cluster way: the
`kubernetes` Service, its ServiceAccount token and CA mounted by the kubelet.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from pathlib import Path

import pytest
import yaml

from localcluster.nodeconfig import NODE_NAME, NODE_SELECTOR, POD_CIDR, TOLERATION
from tests.e2e.conftest import require_local
from tests.e2e.test_chart import CHART, helm
from localcluster.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

# Not test_chart.py's "ocr": the chart's ClusterRoles are named after the release, and the kwok
# tests share this cluster.
RELEASE = "ocr-node"
PROBE_PERIOD = 3


def chart_values(image_ref: str) -> dict:
    repository, tag = image_ref.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "crds": {"install": False},  # the session's CRD (ocr_crd) is shared with the other tests
        "rbac": {"namespaced": True},
        "nodeSelector": dict(NODE_SELECTOR),
        "tolerations": [dict(TOLERATION)],
        # The chart's default waits 10 s, then probes every 15 s. Shorter here so the test sees several
        # probes quickly, with room for the operator's start on a busy machine (5 s + 5 x 3 s).
        "livenessProbe": {"initialDelaySeconds": 5, "periodSeconds": PROBE_PERIOD, "failureThreshold": 5},
    }


def liveness_results(cluster, namespace: str, pod: str) -> dict[str, int]:
    """Liveness probe results of `pod` by outcome, from the real kubelet's prober metrics (through the API server)."""
    text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/metrics/probes").stdout
    out: dict[str, int] = {}
    for line in text.splitlines():
        if (line.startswith("prober_probe_total{") and f'pod="{pod}"' in line and f'namespace="{namespace}"' in line
                and 'probe_type="Liveness"' in line):
            result = line.split('result="', 1)[1].split('"', 1)[0]
            out[result] = out.get(result, 0) + int(float(line.rsplit(" ", 1)[1]))
    return out


def operator_pod(cluster, namespace: str, release: str = RELEASE) -> dict:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", f"app.kubernetes.io/component=operator,app.kubernetes.io/instance={release}",
                                      "-o", "json").stdout)["items"]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def test_helm_installed_operator_pod_runs_non_root_read_only_live_and_reconciles_with_its_service_account(
        cluster, namespace, ocr, ocr_crd, product_images, tmp_path):
    require_local(cluster)
    image = product_images.on_node("operator")
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(image)))
    t0 = time.monotonic()
    helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, "-f", str(values), "--wait", "--timeout", "180s",
         timeout=200)
    try:
        print(f"\nhelm install --wait with the operator image on the real node: {time.monotonic() - t0:.1f}s")
        pod = operator_pod(cluster, namespace)
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == NODE_NAME and pod["status"]["phase"] == "Running"
        assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
        assert pod["spec"]["containers"][0]["image"] == image

        # What the running process really is: uid 65532, and its root filesystem refuses writes.
        probe = ("import os\ntry:\n    open('/written-by-test', 'w')\n    print(os.getuid(), 'writable')\n"
                 "except OSError as e:\n    print(os.getuid(), e.strerror)")
        out = cluster.kubectl("exec", name, "-n", namespace, "--", "python", "-c", probe).stdout.strip().split(maxsplit=1)
        assert out == ["65532", "Read-only file system"], out

        # The kubelet's liveness probe really passes: its prober counts successes, and once the operator
        # is up (a probe before it listens may fail) no further failure and no restart.
        first = wait_for(lambda: (r := liveness_results(cluster, namespace, name)).get("successful", 0) >= 1 and r,
                         timeout=60, message="a successful liveness probe in the kubelet's prober metrics")
        later = wait_for(lambda: (r := liveness_results(cluster, namespace, name))["successful"] >= first["successful"] + 3
                         and r, timeout=60, message="3 more successful liveness probes")
        assert later.get("failed", 0) == first.get("failed", 0), (first, later)
        pod = operator_pod(cluster, namespace)
        status = pod["status"]["containerStatuses"][0]
        assert status["ready"] and status["restartCount"] == 0 and "running" in status["state"], status
        print(f"operator pod liveness probes: {later}, restartCount 0")

        # It reconciles an OcrService (pods on kwok) with its own ServiceAccount's token.
        ocr.apply({"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "metadata": {"name": "via-pod"},
                   "spec": {"image": "registry.invalid/causalflow/ocr-server:1.0", "replicas": 1,
                            "resources": {"gpus": 1, "cpu": "100m", "memory": "256Mi"},
                            "rollout": {"settleSeconds": 1}}})
        ocr.wait_ready("via-pod", timeout=90)
        wait_for(lambda: (ocr.get("ocrs", "via-pod")["status"].get("lastGoodRevision")), timeout=30,
                 message="the revision recorded as last good (settleSeconds 1)")
        deploy = ocr.get("deploy", "via-pod")
        assert any(f["manager"] == "causalflow-ocr-operator" for f in deploy["metadata"]["managedFields"])
        logs = cluster.kubectl("logs", name, "-n", namespace).stdout
        # What the operator says must never carry a 403 status or Forbidden. A 403 only as a number
        # of its own: a timestamp's milliseconds ("07:30:40,403") and the replica's random identity
        # ("..._24403859") each failed a warm make test when matched as a substring.
        messages = re.sub(r"(?m)^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}\]", "", logs)
        assert not re.search(r"(?<![\w.,:])403(?!\w)", messages) and "orbidden" not in messages, logs[-3000:]

        sa = pod["spec"]["serviceAccountName"]
        user = f"system:serviceaccount:{namespace}:{sa}"
        codes: list[int] = []
        writes: list[str] = []
        for line in Path(cluster.audit_log).read_text(errors="replace").splitlines():
            event = json.loads(line)
            if event.get("stage") != "ResponseComplete" or event.get("user", {}).get("username") != user:
                continue
            codes.append(event.get("responseStatus", {}).get("code"))
            ref = event.get("objectRef", {})
            if event["verb"] in ("create", "patch", "update") and ref.get("namespace") == namespace:
                writes.append(f"{event['verb']} {ref.get('resource')}/{ref.get('subresource', '')}")
        assert codes, f"no request of {user} in the audit log"
        assert 403 not in codes and 401 not in codes, sorted(set(codes))
        # The Deployment and the OcrService's status were written by the pod (nobody else holds its token).
        assert "patch deployments/" in writes and "patch ocrservices/status" in writes, sorted(set(writes))
        print(f"operator pod: {len(codes)} API requests as {user}, no 401/403; {len(writes)} writes for the OcrService")
        final = operator_pod(cluster, namespace)["status"]["containerStatuses"][0]
        assert final["restartCount"] == 0, final  # it never gave up on the API server and exited
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", namespace, check=False)
