"""Operator benchmark: N OcrServices applied at once on the local control plane.

Measures, per OcrService, the time from its creation to (a) all of its children existing
(ConfigMap, revisions ConfigMap, Deployment, Service, HPA, PDB) and (b) Ready=True with
observedGeneration == generation; prints p50/p90/p99/max, and the operator process' memory
(peak and final RSS), reconciles, writes and API requests. Not a test: nothing is asserted.

    .venv/bin/python bench/operator_bench.py                 # starts its own local cluster
    .venv/bin/python bench/operator_bench.py --count 20
    .venv/bin/python bench/operator_bench.py --attach DIR    # a running LocalCluster work dir

Pods are kwok pods (nothing runs in them): the figures are the operator's and the control
plane's, not a model's load time. Each OcrService asks for 0 GPUs (the two fake nodes have 16)
and autoscales on ocr_queue_depth (1..2 pods), so it gets the full set of children.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.e2e.operator_fixtures import CRD_FILE, OperatorProcess  # noqa: E402

NAMESPACE = "ocr-bench"
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

    def __init__(self, kubeconfig: Path, names: list[str]) -> None:
        from kubernetes import client, config, watch  # the test tooling's client, not the operator's

        self.client, self.watch = client, watch
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.names = set(names)
        self.seen: dict[tuple[str, str], float] = {}
        self.ready: dict[str, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def _lister(self, plural: str):
        c = self.client
        if plural == "ocrservices":
            api = c.CustomObjectsApi(self.api)
            return lambda **kw: api.list_namespaced_custom_object("ocr.causalflow.dev", "v1alpha1", NAMESPACE,
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
                kwargs = {"namespace": NAMESPACE} if namespaced else {}
                for ev in w.stream(lister, timeout_seconds=30, **kwargs):
                    if self.stop.is_set():
                        w.stop()
                        return
                    obj = ev["object"]
                    if not isinstance(obj, dict):
                        obj = self.api.sanitize_for_serialization(obj)
                    self._record(plural, obj, time.monotonic())
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


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = max(0, min(len(values) - 1, int(round(q / 100 * (len(values) - 1)))))
    return values[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--attach", type=Path, help="work dir of a running LocalCluster (else start one)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--workers", type=int, default=None, help="operator reconcile workers (default: its own)")
    args = ap.parse_args()

    from tests.cluster.cluster import LocalCluster

    own = args.attach is None
    cluster = LocalCluster().start() if own else LocalCluster.attach(args.attach)
    workdir = Path(tempfile.mkdtemp(prefix="ocr-operator-bench-"))
    op = None
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        cluster.kubectl("wait", "--for=condition=Established", "crd/ocrservices.ocr.causalflow.dev")
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
        cluster.kubectl("create", "namespace", NAMESPACE)
        kubeconfig = getattr(cluster, "operator_kubeconfig", cluster.kubeconfig)
        extra = {"OCR_OPERATOR_WORKERS": str(args.workers)} if args.workers else {}
        op = OperatorProcess(Path(kubeconfig), [NAMESPACE], workdir / "operator.log", extra_env=extra).start()
        idle_rss, _ = rss_kib(op.pid)
        cpu0 = cpu_seconds(op.pid)

        names = [f"bench-{i:03d}" for i in range(args.count)]
        watcher = Watcher(Path(cluster.kubeconfig), names)
        watcher.start()
        time.sleep(1.0)
        # "At once": 20 client threads create the objects concurrently; each object's clock starts
        # when its own create call returns (the moment the operator could first see it).
        from concurrent.futures import ThreadPoolExecutor

        from kubernetes import client as k8s

        objects = k8s.CustomObjectsApi(watcher.api)
        created: dict[str, float] = {}

        def create(name: str) -> None:
            objects.create_namespaced_custom_object("ocr.causalflow.dev", "v1alpha1", NAMESPACE, "ocrservices",
                                                    manifest(name))
            created[name] = time.monotonic()

        t0 = time.monotonic()
        with ThreadPoolExecutor(max_workers=20) as pool:
            list(pool.map(create, names))
        applied = time.monotonic() - t0

        peak_rss = idle_rss
        deadline = t0 + args.timeout
        while time.monotonic() < deadline:
            rss, _ = rss_kib(op.pid)
            peak_rss = max(peak_rss, rss)
            if len(watcher.ready) == len(names) and all(watcher.children_done(n) for n in names):
                break
            time.sleep(0.25)
        total = time.monotonic() - t0
        time.sleep(3)
        final_rss, hwm = rss_kib(op.pid)
        cpu = cpu_seconds(op.pid) - cpu0
        probe = op.probe().get("reconciles") or {}
        watcher.stop.set()

        children = [watcher.children_done(n) - created[n] for n in names if watcher.children_done(n)]
        ready = [watcher.ready[n] - created[n] for n in names if n in watcher.ready]
        figures = {
            "count": args.count,
            "apply_seconds": round(applied, 2),
            "children_created": {"n": len(children), "p50": pct(children, 50), "p90": pct(children, 90),
                                 "p99": pct(children, 99), "max": max(children, default=float("nan"))},
            "ready": {"n": len(ready), "p50": pct(ready, 50), "p90": pct(ready, 90), "p99": pct(ready, 99),
                      "max": max(ready, default=float("nan"))},
            "all_ready_seconds": round(total, 2),
            "operator_rss_mib": {"idle": round(idle_rss / 1024, 1), "peak_sampled": round(peak_rss / 1024, 1),
                                 "high_water_mark": round(hwm / 1024, 1), "final": round(final_rss / 1024, 1)},
            "operator": probe,
            "operator_cpu_seconds": round(cpu, 1),
        }
        print(f"\nOperator benchmark: {args.count} OcrServices created at once (20 client threads, all created "
              f"in {applied:.2f}s), local control plane, kwok pods; all Ready {total:.1f}s after the first create")
        print(f"{'':24s}{'n':>5s}{'p50':>9s}{'p90':>9s}{'p99':>9s}{'max':>9s}")
        for label, key in (("create -> all children", "children_created"), ("create -> Ready=True", "ready")):
            f = figures[key]
            print(f"{label:24s}{f['n']:5d}{f['p50']:8.2f}s{f['p90']:8.2f}s{f['p99']:8.2f}s{f['max']:8.2f}s")
        m = figures["operator_rss_mib"]
        print(f"operator RSS: idle {m['idle']} MiB, peak {m['high_water_mark']} MiB, after {m['final']} MiB")
        print(f"operator: {probe.get('reconciles')} reconciles, {probe.get('requests')} API requests "
              f"({probe.get('writes')} writes), {cpu:.1f} CPU-seconds for {args.count} objects; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
        return 0 if len(ready) == len(names) else 1
    finally:
        if op is not None:
            op.stop()
        try:
            cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        except Exception:  # noqa: BLE001
            pass
        if own:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
