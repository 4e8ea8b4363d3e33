"""What the operator benchmark observes: the bench objects, a watcher that records when each
object's children and readiness first appear, the operator's RSS, CPU and API requests, and the
control plane's CPU. Used by bench/operator_bench.py and bench/operator_floor.py.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

NAMESPACE = "ocr-bench"
FLOOR_NAMESPACE = "ocr-bench-floor"
CLIENT_THREADS = 20
CHILD_KINDS = {  # (api, plural) -> name of the child for OcrService `n`
    ("v1", "configmaps"): lambda n: [f"{n}-config", f"{n}-revisions"],
    ("apps/v1", "deployments"): lambda n: [n],
    ("v1", "services"): lambda n: [n],
    ("autoscaling/v2", "horizontalpodautoscalers"): lambda n: [n],
    ("policy/v1", "poddisruptionbudgets"): lambda n: [n],
}


def manifest(name: str) -> dict:
    return {
        "apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "metadata": {"name": name},
        "spec": {
            "image": "registry.invalid/causalflow/ocr-server:bench",
            "resources": {"gpus": 0, "cpu": "10m", "memory": "16Mi"},
            "autoscaling": {"minReplicas": 1, "maxReplicas": 2,
                            "metric": {"name": "ocr_queue_depth", "targetAverageValue": "4"}},
            "terminationGracePeriodSeconds": 0,
            "rollout": {"healthCheck": {"periodSeconds": 1, "failureThreshold": 2}, "modelLoadTimeoutSeconds": 30,
                        "progressDeadlineSeconds": 120, "settleSeconds": 2},
        },
    }


class Watcher:
    """Watches the bench namespace; records when each name's children and readiness first appear."""

    def __init__(self, kubeconfig: Path, names: list[str], namespace: str = NAMESPACE) -> None:
        from kubernetes import client, config, watch  # the test tooling's client, not the operator's

        self.namespace = namespace

        self.client, self.watch = client, watch
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.names = set(names)
        self.seen: dict[tuple[str, str], float] = {}
        self.ready: dict[str, float] = {}
        self.deployment_ready: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def _lister(self, plural: str):
        c = self.client
        if plural == "ocrservices":
            api = c.CustomObjectsApi(self.api)
            return lambda **kw: api.list_namespaced_custom_object("ocr.causalflow.dev", "v1alpha1", self.namespace,
                                                                  "ocrservices", **kw)
        return {
            "configmaps": c.CoreV1Api(self.api).list_namespaced_config_map,
            "services": c.CoreV1Api(self.api).list_namespaced_service,
            "deployments": c.AppsV1Api(self.api).list_namespaced_deployment,
            "horizontalpodautoscalers": c.AutoscalingV2Api(self.api).list_namespaced_horizontal_pod_autoscaler,
            "poddisruptionbudgets": c.PolicyV1Api(self.api).list_namespaced_pod_disruption_budget,
        }[plural]

    def _stream(self, api_version: str, plural: str) -> None:
        lister = self._lister(plural)
        namespaced = plural != "ocrservices"
        while not self.stop.is_set():
            try:
                w = self.watch.Watch()
                kwargs = {"namespace": self.namespace} if namespaced else {}
                # Plain JSON: the client's model classes cost milliseconds per event, CPU the
                # watcher would take from the cluster it measures.
                for ev in w.stream(lister, timeout_seconds=30, deserialize=False, **kwargs):
                    if self.stop.is_set():
                        w.stop()
                        return
                    self._record(plural, ev["object"], time.monotonic())
            except Exception:  # noqa: BLE001 - reconnect
                time.sleep(0.2)

    def _record(self, plural: str, obj: dict, now: float) -> None:
        md = obj.get("metadata") or {}
        with self.lock:
            if plural == "ocrservices":
                ready = next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == "Ready"), {})
                if (ready.get("status") == "True" and md.get("name") in self.names
                        and (obj.get("status") or {}).get("observedGeneration") == md.get("generation")):
                    self.ready.setdefault(md["name"], now)
            else:
                self.seen.setdefault((plural, md.get("name")), now)
                st = obj.get("status") or {}
                if plural == "deployments" and (st.get("readyReplicas") or 0) >= 1 and md.get("name") in self.names:
                    self.deployment_ready.setdefault(md["name"], now)

    def start(self) -> None:
        for (api_version, plural) in [*CHILD_KINDS, ("ocr.causalflow.dev/v1alpha1", "ocrservices")]:
            t = threading.Thread(target=self._stream, args=(api_version, plural), daemon=True)
            t.start()
            self.threads.append(t)

    def children_done(self, name: str) -> float | None:
        with self.lock:
            times = [self.seen.get((plural, child)) for (_, plural), fn in CHILD_KINDS.items() for child in fn(name)]
        return None if any(t is None for t in times) else max(times)


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields.get("VmRSS", 0), fields.get("VmHWM", 0)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def operator_requests(op) -> dict[str, float]:
    """The operator's API requests so far by "METHOD resource", from its /metrics (kopf's probe
    answers from a 10 s cache)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {f"{s.labels['method']} {s.labels['resource']}": s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "ocr_operator_api_requests_total"}


def settle_requests(op, quiet: float = 5.0, limit: float = 120.0) -> dict[str, float]:
    """Wait until the operator has sent no request for `quiet` seconds (its trailing status
    patches and Events count too), at most `limit` seconds; then its requests by kind."""
    last, since, deadline = operator_requests(op), time.monotonic(), time.monotonic() + limit
    while time.monotonic() < deadline and time.monotonic() - since < quiet:
        time.sleep(0.5)
        now = operator_requests(op)
        if now != last:
            last, since = now, time.monotonic()
    return last


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(q / 100 * (len(values) - 1)))))
    return values[k]


def summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": pct(values, 50), "p90": pct(values, 90), "p99": pct(values, 99),
            "max": max(values, default=float("nan"))}



def control_plane_cpu(cluster) -> dict[str, float]:
    """CPU-seconds so far of each control-plane process (kube-apiserver, etcd, ...)."""
    out = {}
    for name, pid in getattr(cluster, "pids", {}).items():
        try:
            out[name] = cpu_seconds(pid)
        except OSError:
            pass
    return out


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before[k], 1) for k in after if k in before}

