"""Operator benchmark: N OcrServices applied at once on the local control plane, against the floor.

Measures, per OcrService, the time from its creation to (a) all of its children existing
(ConfigMap, revisions ConfigMap, Deployment, Service, HPA, PDB) and (b) Ready=True with
observedGeneration == generation, and splits (b) at (c) its Deployment's first Ready pod (the
control plane's share; from (c) to (b) is the operator's own); prints p50/p90/p99/max, and the
operator process' memory (peak and final RSS), reconciles, writes and API requests. The requests (from the operator's
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.operator_floor import delete_floor, measure_api_floor, measure_floor  # noqa: E402
from bench.operator_floor import floor_children, stage_status  # noqa: E402,F401  (bench/apiserver_cost.py)
from bench.operator_observe import (  # noqa: E402
    CLIENT_THREADS, NAMESPACE, Watcher, control_plane_cpu, cpu_between, cpu_seconds, manifest, rss_kib,
    settle_requests, summary)
from localcluster.operator_process import CRD_FILE, OperatorProcess  # noqa: E402


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
        # The control plane's share (its Deployment has a Ready pod) and the operator's own (from
        # then until the OcrService reports Ready), per object.
        deployed = [watcher.deployment_ready[n] - t0 for n in names if n in watcher.deployment_ready]
        lag = [watcher.ready[n] - watcher.deployment_ready[n] for n in names
               if n in watcher.ready and n in watcher.deployment_ready]
        requests = int(sum(by_request.values()))
        figures = {
            "count": args.count,
            "apply_seconds": round(applied, 2),
            "children_created": summary(children),
            "ready": summary(ready),
            "deployment_ready": summary(deployed),
            "ready_after_deployment_ready": summary(lag),
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
        rows = [("asked -> all children", figures["children_created"]), ("asked -> Ready=True", figures["ready"]),
                ("asked -> Deployment Ready", figures["deployment_ready"]),
                ("Deployment Ready -> Ready", figures["ready_after_deployment_ready"])]
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
