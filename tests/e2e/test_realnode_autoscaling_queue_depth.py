"""The second autoscaling signal, end to end: a real server pod's queue scales the OcrService
while GPU utilisation reads low, and both low bring it back down after the stabilisation window.

Node: the server pod runs on `real-node-0` (the product's server image, the tiny model from the
PVC, on the CPU); the operator runs as a local process (the `ocr_operator` fixture). Nothing in
the metric chain is simulated except the GPU: the queue depth is the server's own
`ocr_queue_depth`, scraped by the cluster's Prometheus from the pod's address, served by
prometheus-adapter with the chart's shipped rules and read by kube-controller-manager's HPA
controller; GPU utilisation (DCGM_FI_DEV_GPU_UTIL) is held at 10 % by the fake DCGM exporter,
far under its 80 % target, so only the queue can ask for a second pod.

The load is bounded: LOAD_CLIENTS requests in flight at a time against a server that runs one at
a time (spec.inference.concurrency 1), for at most LOAD_SECONDS; every request is a new page (a
repeated page is answered from the server's result cache without queueing). The pod runs the test
image, whose fault plugin paces each decode step by STEP_PAUSE_SEC (as a slower accelerator
would): a request of TOKENS tokens then takes about 2 s, mostly waiting, so the queue is as deep as
with a busy engine while the pod leaves the machine's cores to the other tests. The scale-up and the scale-down
are one test on purpose: they share the one pod whose cold start (torch import, model load) on
two busy cores costs more than either phase.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.e2e.realnode_fixtures import paced_steps_env, real_ocrservice, service_client
from localcluster.waiting import wait_for
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "queued"
LOAD_CLIENTS = 6          # requests kept in flight; the server works on 1, the rest queue
LOAD_SECONDS = 150        # the load stops at the latest after this long
TARGET_QUEUE_DEPTH = "2"  # per pod; a queue of ~5 asks for ceil(1 x 5 / 2) = 3 > maxReplicas 2
SCALE_DOWN_WINDOW = 15    # behavior.scaleDown.stabilizationWindowSeconds
TOKENS, STEP_PAUSE_SEC = 8, 0.2  # new tokens a request (min_new_tokens: exactly), the pause after each step


class Load:
    """LOAD_CLIENTS threads posting small pages through the Service until stopped (bounded)."""

    def __init__(self, cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.stop_at = time.monotonic() + LOAD_SECONDS
        self.stopped = threading.Event()
        self.answers: dict[int, int] = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(LOAD_CLIENTS)]

    def _run(self, index: int) -> None:
        client = service_client(self.cluster, self.namespace, NAME, timeout=60)
        sent = 0
        try:
            while not self.stopped.is_set() and time.monotonic() < self.stop_at:
                # a new page every time: a repeated one is a result-cache hit that never queues
                png = samples.png(600, 400, seed=index * 100_000 + sent)
                sent += 1
                try:
                    status = client.ocr(png, max_new_tokens=str(TOKENS), min_new_tokens=str(TOKENS)).status_code
                except Exception:  # noqa: BLE001 (a timeout counts as an answer-less request)
                    status = 0
                with self.lock:
                    self.answers[status] = self.answers.get(status, 0) + 1
        finally:
            client.close()

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopped.set()
        for t in self.threads:
            t.join(timeout=70)


def hpa_metric(hpa: dict, name: str) -> float | None:
    """The HPA's current average value of Pods metric `name` (a quantity: 10, 2500m)."""
    for m in (hpa.get("status") or {}).get("currentMetrics") or ():
        if (m.get("pods") or {}).get("metric", {}).get("name") == name:
            raw = str(m["pods"]["current"]["averageValue"])
            return float(raw[:-1]) / 1000 if raw.endswith("m") else float(raw)
    return None


def test_a_real_pods_queue_scales_up_while_gpu_is_low_and_both_low_scale_down_after_the_window(
        metric_chain, cluster, namespace, ocr, ocr_operator, product_images, model_pvc):
    image = product_images.on_node("server_tiny")  # the product's server with the test helpers
    cluster.set_metric(namespace, "DCGM_FI_DEV_GPU_UTIL", 10)  # every GPU pod of the namespace: low
    behavior = {"scaleUp": {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}]},
                "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}]}}
    manifest = real_ocrservice(NAME, image, model={"pvc": {"claimName": model_pvc, "subPath": "weights"}},
                               inference={"concurrency": 1, "batchSize": 1},
                               env=[{"name": k, "value": v} for k, v in paced_steps_env(STEP_PAUSE_SEC).items()])
    manifest["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "targetGPUUtilization": 80,
                                       "targetQueueDepth": TARGET_QUEUE_DEPTH, "behavior": behavior}
    t0 = time.monotonic()
    ocr.apply(manifest)
    ocr.wait_ready(NAME, timeout=300)
    print(f"\nOcrService applied -> Ready (server pod on the real node): {time.monotonic() - t0:.1f}s")

    def hpa() -> dict:
        return ocr.get("hpa", NAME) or {}

    # Both signals readable through the chain before any load: GPU 10 %, queue empty, 1 replica.
    t0 = time.monotonic()
    wait_for(lambda: hpa_metric(hpa(), "DCGM_FI_DEV_GPU_UTIL") == 10 and hpa_metric(hpa(), "ocr_queue_depth") == 0,
             timeout=90, interval=1, message="the HPA reads DCGM_FI_DEV_GPU_UTIL 10 and ocr_queue_depth 0")
    print(f"both metrics readable by the HPA {time.monotonic() - t0:.1f}s after Ready")
    assert hpa()["status"]["desiredReplicas"] == 1

    with Load(cluster, namespace) as load:
        load_started = time.monotonic()
        # "The queue built up": the first scrape that saw requests waiting in the pod.
        wait_for(lambda: any(float(s["value"][1]) >= 1 for s in cluster.prometheus_query(
                     f'ocr_queue_depth{{namespace="{namespace}",service="{NAME}"}}')),
                 timeout=60, interval=0.5, message="Prometheus scraped a queue from the server pod")
        queued = time.monotonic()
        try:
            scaled = wait_for(lambda: (h := hpa()) and h["status"].get("desiredReplicas") == 2 and h,
                              timeout=LOAD_SECONDS - 30, interval=0.5, message="the HPA asks for a second replica")
        except AssertionError:
            queue_series = cluster.prometheus_query('ocr_queue_depth{namespace="%s"}[1m]' % namespace)
            print(f"HPA status: {hpa().get('status')}\nanswers: {load.answers}\nqueue in Prometheus: {queue_series}")
            raise
        added = time.monotonic()
        gpu, queue = hpa_metric(scaled, "DCGM_FI_DEV_GPU_UTIL"), hpa_metric(scaled, "ocr_queue_depth")
        assert gpu == 10, f"GPU utilisation must have stayed low, the HPA read {gpu}"
        assert queue is not None and queue > float(TARGET_QUEUE_DEPTH), f"the queue drove it: {queue}"
        wait_for(lambda: ocr.get("deployment", NAME)["spec"]["replicas"] == 2, timeout=15,
                 message="the Deployment got the second replica")
    print(f"\nqueue depth built up {queued - load_started:.1f}s after the load started; the HPA added a "
          f"replica {added - queued:.1f}s after the queue built up (HPA read queue {queue:.2f}/pod vs "
          f"target {TARGET_QUEUE_DEPTH}, GPU {gpu:.0f} vs 80); answers {load.answers}")
    assert load.answers.get(200, 0) > 0, load.answers

    load_stopped = time.monotonic()
    wait_for(lambda: hpa().get("status", {}).get("desiredReplicas") == 1, timeout=180, interval=1,
             message="back to 1 replica once the queue and the GPU are both low")
    down = time.monotonic() - load_stopped
    print(f"scale-down to 1 replica {down:.1f}s after the load stopped "
          f"(1-minute average in the adapter rule + {SCALE_DOWN_WINDOW}s stabilisation window)")
    assert down >= SCALE_DOWN_WINDOW, "the scale-down came before the stabilisation window could pass"
    wait_for(lambda: ocr.get("deployment", NAME)["spec"]["replicas"] == 1, timeout=15,
             message="the Deployment is back to 1 replica")
