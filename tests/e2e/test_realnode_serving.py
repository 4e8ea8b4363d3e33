"""An OcrService whose pods really run the server image on the REAL node and serve OCR through its Service.

Node: every server pod here runs on `real-node-0` (the OcrService selects and tolerates it); the
operator runs as a local process (the `ocr_operator` fixture). The image is the product's server
image built from Dockerfile.server (no weights inside); the weights are the tiny random model on a
hostPath PersistentVolume, mounted the way `spec.model.pvc` does it. Requests go from this machine
to the Service's ClusterIP, which kube-proxy routes to the pod's address on the harness's bridge.
"""

from __future__ import annotations

import ipaddress
import time

import httpx
import pytest

from localcluster.nodeconfig import NODE_NAME, POD_CIDR
from tests.e2e.realnode_fixtures import (API_KEY, pod_ready, real_ocrservice, server_pods, service_client, tls_secret,
                                         wait_service_connects)
from localcluster.waiting import wait_for
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]


def container_status(pod: dict) -> dict:
    return (pod["status"].get("containerStatuses") or [{}])[0]


def wait_serving(cluster, ocr, namespace: str, name: str, timeout: float = 300) -> tuple[dict, float]:
    """The OcrService Ready (its pod passed the startup and readiness probes); its pod and the time it took."""
    t0 = time.monotonic()
    ocr.wait_ready(name, timeout=timeout)
    took = time.monotonic() - t0
    pods = [p for p in server_pods(cluster, namespace, name) if pod_ready(p)]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    wait_service_connects(cluster, namespace, name)
    return pods[0], took


def test_ocrservice_pod_runs_the_server_image_with_weights_from_the_pvc_and_serves_ocr_through_its_service(
        cluster, namespace, ocr, ocr_operator, product_images, model_pvc):
    image = product_images.on_node("server")
    ocr.apply(real_ocrservice("reader", image, model={"pvc": {"claimName": model_pvc, "subPath": "weights"}}))
    pod, took = wait_serving(cluster, ocr, namespace, "reader")
    print(f"\nOcrService applied -> Ready (server pod started, model loaded, probes passed): {took:.1f}s")
    name = pod["metadata"]["name"]
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
    wide = cluster.kubectl("get", "pods", "-n", namespace, "-o", "wide").stdout
    row = next(line.split() for line in wide.splitlines() if line.startswith(name))
    assert "Running" in row and NODE_NAME in row and pod["status"]["podIP"] in row, wide
    logs = cluster.kubectl("logs", name, "-n", namespace).stdout
    assert "listening on http://0.0.0.0:8080" in logs, logs[-3000:]
    assert "weights loaded from /models/deepseek-ai/DeepSeek-OCR-2" in logs, logs[-3000:]  # the PVC at CACHE_DIR
    assert "ready: model" in logs, logs[-3000:]

    client = service_client(cluster, namespace, "reader")
    try:
        health = wait_for(lambda: (r := client.get("/health")).status_code == 200 and r, timeout=30,
                          message="GET /health through the ClusterIP")
        assert "TINY RANDOM MODEL" in health.json()["model"]  # the PV's weights: this image has none
        t0 = time.monotonic()
        r = client.ocr(samples.png(2000, 1000))
        print(f"POST /v1/ocr 2000x1000 through the Service: {time.monotonic() - t0:.2f}s")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["layout"]["global_view"] == [1024, 1024] and body["layout"]["crop_size"] == [768, 768]
        assert body["layout"]["crop_grid"] == [2, 1] and body["layout"]["crops"] == 2
        assert body["usage"]["visual_tokens"] == 256 + 2 * 144
        assert 1 <= body["usage"]["generated_tokens"] <= 8  # spec.inference.maxNewTokens reached the server
        small = client.ocr(samples.png(600, 400, seed=1)).json()
        assert small["layout"]["crops"] == 0 and small["usage"]["visual_tokens"] == 256
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert 'ocr_requests_total{class="interactive",endpoint="/v1/ocr",status="200"} 2.0' in metrics.text, metrics.text[:2000]
    finally:
        client.close()
    # Liveness (period 1 s, 3 failures restart) has run many times by now without a restart.
    time.sleep(3)
    now = next(p for p in server_pods(cluster, namespace, "reader") if p["metadata"]["name"] == name)
    assert pod_ready(now) and container_status(now)["restartCount"] == 0


def test_auth_and_tls_the_server_speaks_https_enforces_the_secrets_key_and_its_probes_still_pass(
        cluster, namespace, ocr, ocr_operator, product_images, model_pvc, tmp_path):
    image = product_images.on_node("server")
    dns = f"guarded.{namespace}.svc"
    ca = tls_secret(cluster, namespace, "guarded-tls", dns, tmp_path)
    cluster.kubectl("create", "secret", "generic", "guarded-keys", "-n", namespace, f"--from-literal=api-keys={API_KEY}")
    ocr.apply(real_ocrservice("guarded", image, model={"pvc": {"claimName": model_pvc, "subPath": "weights"}},
                              auth={"secretName": "guarded-keys"}, tls={"secretName": "guarded-tls"}))
    pod, took = wait_serving(cluster, ocr, namespace, "guarded")
    print(f"\nOcrService with auth + TLS applied -> Ready: {took:.1f}s")
    probes = pod["spec"]["containers"][0]
    assert {probes[p]["httpGet"]["scheme"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {"HTTPS"}
    assert "listening on https://0.0.0.0:8080" in cluster.kubectl("logs", pod["metadata"]["name"], "-n", namespace).stdout

    anonymous = service_client(cluster, namespace, "guarded", https=True, ca=ca, server_name=dns)
    keyed = service_client(cluster, namespace, "guarded", https=True, ca=ca, server_name=dns, api_key=API_KEY)
    plain = service_client(cluster, namespace, "guarded", timeout=10)
    try:
        page = samples.png(600, 400, seed=2)
        denied = anonymous.ocr(page)  # the certificate verified against our CA, for the Service's name
        assert denied.status_code == 401 and denied.headers["www-authenticate"] == "Bearer"
        assert anonymous.ocr(page, headers={"Authorization": "Bearer not-the-key-123"}).status_code == 401
        allowed = keyed.ocr(page)
        assert allowed.status_code == 200, allowed.text
        assert allowed.json()["layout"]["global_view"] == [1024, 1024]
        assert keyed.client.post("/v1/ocr", files={"file": ("p.png", page, "image/png")},
                                 headers={"X-API-Key": API_KEY}, extensions=keyed._ext()).status_code == 200
        with pytest.raises(httpx.HTTPError):  # no plain HTTP on the port
            plain.get("/health")
    finally:
        for c in (anonymous, keyed, plain):
            c.close()
    time.sleep(3)
    now = next(p for p in server_pods(cluster, namespace, "guarded") if p["metadata"]["name"] == pod["metadata"]["name"])
    assert pod_ready(now) and container_status(now)["restartCount"] == 0  # HTTPS probes keep passing
