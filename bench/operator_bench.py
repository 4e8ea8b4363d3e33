"""Operator benchmark: N OcrServices applied at once on the local control plane, against the floor.

Measures, per OcrService, the time from its creation to (a) all of its children existing
(ConfigMap, revisions ConfigMap, Deployment, Service, HPA, PDB) and (b) Ready=True with
observedGeneration == generation; prints p50/p90/p99/max, and the operator process' memory
(peak and final RSS), reconciles, writes and API requests. The requests (from the operator's
`ocr_operator_api_requests_total`) and its CPU-seconds are counted until it has sent nothing
for 5 s, so the status patches and Events that trail the last Ready count too. Not a test:
nothing is asserted.

In the same run and on the same cluster it first measures the **floor**: the same children
(rendered by the operator's own render functions, without owner references) written directly,
all objects at once with the same client concurrency and no operator; "Ready" there is the
Deployment's first Ready pod. The floor's namespace is then deleted, and the operator's phase
starts only once it is gone, so neither phase pays for the other's clean-up. The control
plane's CPU-seconds (kube-apiserver, etcd, controllers, kwok) are printed for each phase.

Between the two it measures the **API floor** (`measure_api_floor`): the writes any operator of
this API makes for a new object, issued directly with no reconciling: the OcrService's create,
its children owned by it, three status patches (at once, when its Deployment has a Ready pod,
2 s later) and two Events. Its Ready is the OcrService's Ready=True, as in the operator's phase.
It separates what the operator's own work costs (ratio to the API floor) from what the custom
resource's writes cost the API server (the API floor against the floor): on a CPU-bound
machine an OcrService status patch costs kube-apiserver several times a ConfigMap apply
(bench/apiserver_cost.py).
Both clocks start when all N objects are asked for at once, as a user's `kubectl apply -f DIR/`
does: the OcrServices' creates, or the floor's child writes, are then issued with
CLIENT_THREADS in flight, so an object's time includes its wait for a slot (the operator's
objects also wait for a worker). The floor's time from an object's own first write is printed
too. The operator's p50/p99 are then printed as ratios to the floor, with API requests,
CPU-seconds and RSS per object. `--json FILE` writes everything, including
`ratio_p99_children`, `ratio_p99_ready`, `requests_per_object` and `rss_peak_mib`, and the
ratios to the API floor as `ratio_p99_children_api_floor`, `ratio_p99_ready_api_floor`.

    .venv/bin/python bench/operator_bench.py                 # starts its own local cluster
    .venv/bin/python bench/operator_bench.py --count 20
    .venv/bin/python bench/operator_bench.py --attach DIR    # a running LocalCluster work dir
    .venv/bin/python bench/operator_bench.py --repeat 3      # 3 rounds of floor + operator, medians

Pods are kwok pods (nothing runs in them): the figures are the operator's and the control
plane's, not a model's load time. Each OcrService asks for 0 GPUs (the two fake nodes have 16)
and autoscales on ocr_queue_depth (1..2 pods), so it gets the full set of children.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.operator_process import CRD_FILE, OperatorProcess  # noqa: E402

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


def floor_children(name: str, namespace: str, owner: dict | None = None) -> list[dict]:
    """What the operator would write for `name`, rendered by its own code: without an owner,
    or owned by `owner` (the stored OcrService: metadata.name, namespace and uid)."""
    from ocr_operator.ocrservice import revisions
    from ocr_operator.ocrservice.render import render_all
    from ocr_operator.spec import parse

    body = owner or {**manifest(name), "metadata": {"name": name, "namespace": namespace, "uid": f"floor-{name}"}}
    desired = render_all(body, parse(body["spec"]), servicemonitor_available=False)
    history = revisions.parse_history(None, limit=3).record(desired.revision, desired.pod_template)
    objs = [o for o in desired.objects.values() if o is not None] + [revisions.render_history(body, history)]
    if owner is None:
        for obj in objs:
            obj["metadata"].pop("ownerReferences", None)
    return objs


def stage_status(stage: str, cr: dict, now: float) -> dict:
    """A status of the operator's shape and size (its keys, its five conditions) for the API
    floor: "progressing" (first reconcile), "ready" (pods Ready, the settle clock started),
    "settled". A synthetic body, not the operator's own (status.build needs a reconcile)."""
    rev = "0123456789"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    precise = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"
    gen = cr["metadata"]["generation"]
    ready, settled = stage in ("ready", "settled"), stage == "settled"

    def cond(type_, status, reason, message):
        return {"type": type_, "status": status, "reason": reason, "message": message,
                "observedGeneration": gen, "lastTransitionTime": stamp}
    rollout = {"currentRevision": rev, "phase": "Healthy" if settled else "Progressing",
               "startedAt": precise}
    if ready:
        rollout["readySince"] = precise
    if settled:
        rollout["lastGoodRevision"] = rev
    status = {
        "observedGeneration": gen, "currentRevision": rev, "desiredRevision": rev, "desiredReplicas": 1,
        "replicas": int(ready), "readyReplicas": int(ready), "updatedReplicas": int(ready),
        "replicaSummary": f"{int(ready)}/1", "gpuUtilization": "<unknown>/4", "rollout": rollout,
        "selector": f"app.kubernetes.io/name=causalflow-ocr,app.kubernetes.io/instance={cr['metadata']['name']}",
        "url": f"http://{cr['metadata']['name']}.{cr['metadata']['namespace']}.svc:8080",
        "conditions": [
            cond("Ready", "True" if ready else "False", "AllReplicasReady" if ready else "RolloutInProgress",
                 f"{int(ready)}/1 pods of revision {rev} Ready"),
            cond("Available", "True" if ready else "False",
                 "MinimumReplicasAvailable" if ready else "NoReplicasReady", f"{int(ready)} pod(s) Ready and serving"),
            cond("Progressing", "False" if settled else "True", "RolloutComplete" if settled else "RolloutInProgress",
                 f"revision {rev} is Ready and settled" if settled else f"rolling out revision {rev}"),
            cond("Degraded", "False", "AsExpected", "no failed revision"),
            cond("ScalingActive", "Unknown", "WaitingForAutoscaler", "the HorizontalPodAutoscaler has not reported yet"),
        ],
    }
    if settled:
        status["lastGoodRevision"] = rev
    return status


def fresh_floor_namespace(cluster, names: list[str]) -> Watcher:
    """An empty floor namespace, and a started watcher on it."""
    cluster.kubectl("delete", "namespace", FLOOR_NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=180s")
    cluster.kubectl("create", "namespace", FLOOR_NAMESPACE)
    watcher = Watcher(Path(cluster.kubeconfig), names, FLOOR_NAMESPACE)
    watcher.start()
    time.sleep(1.0)
    return watcher


def measure_floor(cluster, names: list[str], timeout: float) -> dict:
    """The same children written directly (server-side apply, each object's children at once,
    CLIENT_THREADS objects at a time), no operator; when each object's children exist and its
    Deployment has a Ready pod, from when all objects were handed over (`children_created`,
    `ready`) and from the object's own first write (`children_after_first_write`)."""
    import asyncio

    from lightkube.config.kubeconfig import KubeConfig

    from ocr_operator import wiring

    watcher = fresh_floor_namespace(cluster, names)
    started: dict[str, float] = {}  # an object's first write
    rendered = {n: floor_children(n, FLOOR_NAMESPACE) for n in names}

    async def write_all() -> int:
        kube = wiring.client(KubeConfig.from_file(str(cluster.kubeconfig)))
        gate = asyncio.Semaphore(CLIENT_THREADS)

        async def one(name: str) -> None:
            async with gate:
                started[name] = time.monotonic()
                await asyncio.gather(*(kube.apply(o) for o in rendered[name]))
        try:
            await asyncio.gather(*(one(n) for n in names))
            return kube.requests
        finally:
            await kube.close()

    t0 = time.monotonic()  # every object asked for at once
    requests = asyncio.run(write_all())
    written = time.monotonic() - t0
    deadline = t0 + timeout
    while time.monotonic() < deadline:
        if all(watcher.children_done(n) for n in names) and len(watcher.deployment_ready) == len(names):
            break
        time.sleep(0.25)
    watcher.stop.set()
    done = {n: watcher.children_done(n) for n in names}
    children = [done[n] - t0 for n in names if done[n]]
    after_first_write = [done[n] - started[n] for n in names if done[n]]
    ready = [watcher.deployment_ready[n] - t0 for n in names if n in watcher.deployment_ready]
    return {"written_seconds": round(written, 2), "requests": requests,
            "children_created": summary(children), "children_after_first_write": summary(after_first_write),
            "ready": summary(ready), "load_average": os.getloadavg()}


def measure_api_floor(cluster, names: list[str], timeout: float, settle: float = 2.0, minimal: bool = False) -> dict:
    """The API floor: the writes any operator of this API makes, issued directly with no
    reconciling. Per object: create the OcrService (CLIENT_THREADS creates in flight, as in the
    operator's phase), then, CLIENT_THREADS objects at a time, apply its children owned by it
    (so the garbage collector tracks them, as the operator's), one status patch and one Event; when
    its Deployment has a Ready pod, the Ready status patch; `settle` seconds later the settled
    status patch and an Event (the operator's 3 status patches and 2 Events for a new object).
    Ready is the OcrService's own Ready=True, as in the operator's phase; both clocks from
    when all objects were asked for. `minimal`: the least any operator that reports Ready in
    the status writes: the create, the children and the Ready status patch only."""
    import asyncio
    import datetime as dt

    from lightkube.config.kubeconfig import KubeConfig

    from ocr_operator import wiring
    from ocr_operator.runtime.events import post_event

    watcher = fresh_floor_namespace(cluster, names)

    async def write_all() -> int:
        kube = wiring.client(KubeConfig.from_file(str(cluster.kubeconfig)))
        creates, gate = asyncio.Semaphore(CLIENT_THREADS), asyncio.Semaphore(CLIENT_THREADS)
        deadline = time.monotonic() + timeout

        async def status(cr: dict, stage: str) -> None:
            md = cr["metadata"]
            await kube.merge_patch("OcrService", FLOOR_NAMESPACE, md["name"],
                                   {"status": stage_status(stage, cr, time.time())}, subresource="status")

        async def event(cr: dict, reason: str) -> None:  # the body the operator posts
            await post_event(kube, cr, "Normal", reason, reason, dt.datetime.now(dt.timezone.utc))

        async def one(name: str) -> None:
            async with creates:  # as the operator's phase creates them: CLIENT_THREADS at a time
                body = manifest(name)
                body["metadata"]["namespace"] = FLOOR_NAMESPACE
                cr = await kube.create("OcrService", FLOOR_NAMESPACE, body)
            async with gate:  # then its writes, CLIENT_THREADS objects at a time
                await asyncio.gather(*(kube.apply(o) for o in floor_children(name, FLOOR_NAMESPACE, cr)))
                if not minimal:
                    await asyncio.gather(status(cr, "progressing"), event(cr, "RolloutStarted"))
            while name not in watcher.deployment_ready and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
            await status(cr, "ready")
            if not minimal:
                await asyncio.sleep(settle)
                await asyncio.gather(status(cr, "settled"), event(cr, "RolloutSucceeded"))
        try:
            await asyncio.gather(*(one(n) for n in names))
            return kube.requests
        finally:
            await kube.close()

    t0 = time.monotonic()
    requests = asyncio.run(write_all())
    while time.monotonic() < t0 + timeout:
        if all(watcher.children_done(n) for n in names) and len(watcher.ready) == len(names):
            break
        time.sleep(0.25)
    watcher.stop.set()
    children = [watcher.children_done(n) - t0 for n in names if watcher.children_done(n)]
    ready = [watcher.ready[n] - t0 for n in names if n in watcher.ready]
    return {"requests": requests, "children_created": summary(children), "ready": summary(ready),
            "load_average": os.getloadavg()}


def delete_floor(cluster, timeout: float) -> float:
    """Delete the floor's namespace and wait until it is gone: otherwise the namespace controller,
    the garbage collector and kwok would still be deleting its objects and pods on the
    operator's clock."""
    started = time.monotonic()
    cluster.kubectl("delete", "namespace", FLOOR_NAMESPACE, "--wait=true", f"--timeout={int(timeout)}s",
                    check=False, timeout=timeout + 30)
    return round(time.monotonic() - started, 1)


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


def one_round(cluster, names: list[str], args, workdir: Path, round_no: int) -> tuple[dict, bool]:
    """The floor, then the operator's phase, on `cluster`; the figures and whether all got Ready."""
    op = None
    try:
        # A namespace an earlier run left terminating (--attach) would load the floor's phase.
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=300s")
        cp0 = control_plane_cpu(cluster)
        floor = None if args.no_floor else measure_floor(cluster, names, args.timeout)
        if floor:
            floor["control_plane_cpu_seconds"] = cpu_between(cp0, control_plane_cpu(cluster))
            floor["cleanup_seconds"] = delete_floor(cluster, args.timeout)
        api_floor = None
        if not args.no_floor and not args.no_api_floor:
            cp_api = control_plane_cpu(cluster)
            api_floor = measure_api_floor(cluster, names, args.timeout, minimal=args.api_floor_minimal)
            api_floor["minimal"] = args.api_floor_minimal
            api_floor["control_plane_cpu_seconds"] = cpu_between(cp_api, control_plane_cpu(cluster))
            api_floor["cleanup_seconds"] = delete_floor(cluster, args.timeout)
        cluster.kubectl("create", "namespace", NAMESPACE)
        kubeconfig = getattr(cluster, "operator_kubeconfig", cluster.kubeconfig)
        extra = {"OCR_OPERATOR_WORKERS": str(args.workers)} if args.workers else {}
        op = OperatorProcess(Path(kubeconfig), [NAMESPACE], workdir / f"operator-{round_no}.log",
                             extra_env=extra).start()
        idle_rss, _ = rss_kib(op.pid)
        cpu0 = cpu_seconds(op.pid)

        watcher = Watcher(Path(cluster.kubeconfig), names)
        watcher.start()
        time.sleep(1.0)
        cp1 = control_plane_cpu(cluster)
        # "At once": 20 client threads create the objects concurrently; every object's clock starts
        # at t0, as the floor's does.
        from concurrent.futures import ThreadPoolExecutor

        from kubernetes import client as k8s

        objects = k8s.CustomObjectsApi(watcher.api)

        def create(name: str) -> None:
            objects.create_namespaced_custom_object("ocr.causalflow.dev", "v1alpha1", NAMESPACE, "ocrservices",
                                                    manifest(name))

        t0 = time.monotonic()  # every OcrService asked for at once
        with ThreadPoolExecutor(max_workers=CLIENT_THREADS) as pool:
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
        by_request = settle_requests(op)
        quiet_after = time.monotonic() - t0
        final_rss, hwm = rss_kib(op.pid)
        cpu = cpu_seconds(op.pid) - cpu0
        control_plane = cpu_between(cp1, control_plane_cpu(cluster))
        probe = op.probe().get("reconciles") or {}
        watcher.stop.set()

        children = [watcher.children_done(n) - t0 for n in names if watcher.children_done(n)]
        ready = [watcher.ready[n] - t0 for n in names if n in watcher.ready]
        requests = int(sum(by_request.values()))
        figures = {
            "count": args.count,
            "apply_seconds": round(applied, 2),
            "children_created": summary(children),
            "ready": summary(ready),
            "all_ready_seconds": round(total, 2),
            "requests_counted_until_seconds": round(quiet_after, 1),
            "requests_by": by_request,
            "operator_rss_mib": {"idle": round(idle_rss / 1024, 1), "peak_sampled": round(peak_rss / 1024, 1),
                                 "high_water_mark": round(hwm / 1024, 1), "final": round(final_rss / 1024, 1)},
            "operator": probe,
            "operator_cpu_seconds": round(cpu, 1),
            "requests_per_object": round(requests / args.count, 2),
            "cpu_seconds_per_object": round(cpu / args.count, 3),
            "rss_peak_mib": round(max(hwm, peak_rss) / 1024, 1),
            "load_average": os.getloadavg(),
            "control_plane_cpu_seconds": control_plane,
            "floor": floor,
            "api_floor": api_floor,
        }
        bases = [(label, base, suffix) for label, base, suffix in
                 (("floor", floor, ""), ("API floor", api_floor, "_api_floor")) if base]
        for _, base, suffix in bases:
            for key, label in (("children_created", "children"), ("ready", "ready")):
                for q in ("p50", "p99"):
                    figures[f"ratio_{q}_{label}{suffix}"] = (round(figures[key][q] / base[key][q], 2)
                                                           if base[key][q] else None)
        print(f"\nOperator benchmark: {args.count} OcrServices created at once ({CLIENT_THREADS} client threads, all "
              f"created in {applied:.2f}s), local control plane, kwok pods; all Ready {total:.1f}s after the first create")
        print(f"{'':30s}{'n':>5s}{'p50':>9s}{'p90':>9s}{'p99':>9s}{'max':>9s}")
        rows = [("asked -> all children", figures["children_created"]), ("asked -> Ready=True", figures["ready"])]
        if floor:
            rows += [("floor: asked -> all children", floor["children_created"]),
                     ("floor: asked -> pod Ready", floor["ready"]),
                     ("floor: 1st write -> children", floor["children_after_first_write"])]
        if api_floor:
            rows += [("API floor: asked -> children", api_floor["children_created"]),
                     ("API floor: asked -> Ready", api_floor["ready"])]
        for label, f in rows:
            print(f"{label:30s}{f['n']:5d}{f['p50']:8.2f}s{f['p90']:8.2f}s{f['p99']:8.2f}s{f['max']:8.2f}s")
        for label, base, suffix in bases:
            r = {k: figures[f"ratio_{k}{suffix}"] for k in ("p50_children", "p99_children", "p50_ready", "p99_ready")}
            print(f"operator / {label}: children p50 {r['p50_children']}x p99 {r['p99_children']}x; "
                  f"Ready p50 {r['p50_ready']}x p99 {r['p99_ready']}x "
                  f"({label}: {base['requests']} requests, load average {base['load_average'][0]:.1f})")
        m = figures["operator_rss_mib"]
        print(f"operator RSS: idle {m['idle']} MiB, peak {figures['rss_peak_mib']} MiB, after {m['final']} MiB")
        print(f"operator: {probe.get('reconciles')} reconciles, {requests} API requests until it went quiet "
              f"{quiet_after:.1f}s after the first create "
              f"({figures['requests_per_object']} per object, {probe.get('writes')} writes), {cpu:.1f} CPU-seconds "
              f"({figures['cpu_seconds_per_object']} per object); load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
        for label, base, _ in bases:
            print(f"control-plane CPU-seconds, {label} phase: " + ", ".join(
                f"{k} {v}" for k, v in base["control_plane_cpu_seconds"].items()))
        print("control-plane CPU-seconds, operator phase: " + ", ".join(f"{k} {v}" for k, v in control_plane.items()))
        by = sorted(by_request.items(), key=lambda kv: -kv[1])
        print("requests per object by kind: " + ", ".join(f"{k} {v / args.count:.2f}" for k, v in by if v >= args.count / 10))
        return figures, len(ready) == len(names)
    finally:
        if op is not None:
            op.stop()


def median(values: list[float | None]) -> float | None:
    """The median of the values that were measured (None where a round had no floor)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def median_figures(rounds: list[dict]) -> dict:
    """Several rounds: the median of each round's own ratio (operator against the floor measured
    just before it), requests and CPU per object, p50/p99; the largest RSS."""
    keys = [k for k in rounds[0] if k.startswith("ratio_")] + ["requests_per_object", "cpu_seconds_per_object"]
    out: dict = {"count": rounds[0]["count"], "rounds_measured": len(rounds)}
    for key in keys:
        value = median([r.get(key) for r in rounds])
        out[key] = round(value, 3) if value is not None else None
    for phase in ("children_created", "ready"):
        out[phase] = {q: median([r[phase][q] for r in rounds]) for q in ("p50", "p99")}
        for base in ("floor", "api_floor"):
            if rounds[0].get(base):
                out[f"{base}_{phase}"] = {q: median([r[base][phase][q] for r in rounds]) for q in ("p50", "p99")}
    out["rss_peak_mib"] = max(r["rss_peak_mib"] for r in rounds)
    out["load_average"] = os.getloadavg()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--attach", type=Path, help="work dir of a running LocalCluster (else start one)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--workers", type=int, default=None, help="operator reconcile workers (default: its own)")
    ap.add_argument("--no-floor", action="store_true", help="skip both floors")
    ap.add_argument("--no-api-floor", action="store_true",
                    help="skip the API floor (the OcrService, its children, status patches and Events written directly)")
    ap.add_argument("--api-floor-minimal", action="store_true",
                    help="the API floor writes only the OcrService, its children and one status patch (Ready)")
    ap.add_argument("--keep", action="store_true", help="leave the bench namespace in place (to inspect it)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds of floor + operator on the same cluster; the JSON's top-level figures are then "
                         "medians of the rounds' own ratios (the floor moves from run to run)")
    args = ap.parse_args()

    from localcluster.cluster import LocalCluster

    own = args.attach is None
    if own:  # room for the floor's pods and the operator's: 2 x count, plus slack
        os.environ.setdefault("CAUSALFLOW_KWOK_NODES", str(max(2, -(-3 * args.count // 500))))
        os.environ.setdefault("CAUSALFLOW_KWOK_PODS", "500")
    cluster = LocalCluster().start() if own else LocalCluster.attach(args.attach)
    workdir = Path(tempfile.mkdtemp(prefix="ocr-operator-bench-"))
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        cluster.kubectl("wait", "--for=condition=Established", "crd/ocrservices.ocr.causalflow.dev")
        names = [f"bench-{i:03d}" for i in range(args.count)]
        rounds, all_ready = [], True
        for round_no in range(args.repeat):
            if args.repeat > 1:
                print(f"\n=== round {round_no + 1} of {args.repeat}")
            figures, ready = one_round(cluster, names, args, workdir, round_no)
            rounds.append(figures)
            all_ready = all_ready and ready
        result = rounds[0]
        if len(rounds) > 1:
            result = {**median_figures(rounds), "rounds": rounds}
            print(f"\nmedian of {len(rounds)} rounds: ratio p99 children {result.get('ratio_p99_children')}x, "
                  f"Ready {result.get('ratio_p99_ready')}x; {result['requests_per_object']} requests and "
                  f"{result['cpu_seconds_per_object']} CPU-seconds per object; RSS peak {result['rss_peak_mib']} MiB")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return 0 if all_ready else 1
    finally:
        try:
            if not args.keep:
                cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        except Exception:  # noqa: BLE001
            pass
        if own:
            cluster.stop()
        if args.keep:
            print(f"operator logs kept: {workdir}/operator-*.log")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
