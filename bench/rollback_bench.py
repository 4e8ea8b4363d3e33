"""Time from the first failure signal to the rollback applied, over repeated failing upgrades.

    .venv/bin/python bench/rollback_bench.py [--runs 20] [--kinds crashloop,image-pull-error,...]
                                             [--kubeconfig PATH]

Starts the local control plane (localcluster, kwok fake GPU nodes) unless --kubeconfig names a
running one, installs the CRD, runs the operator as a process, creates one healthy OcrService
and then upgrades it `--runs` times with a failing pod template, cycling through the failure
kinds. Each upgrade is a new revision (a run-number pod label), so each is attempted, fails and
is rolled back. A watch on the namespace timestamps, on this machine's clock:

- the failure signal: the waiting reason (CrashLoopBackOff, ImagePullBackOff) or the readiness
  loss as the watch delivered it; for the deadline-based failures the deadline itself
  (pod creationTimestamp + startup budget, or + unschedulable grace);
- the rollback applied: the Deployment's pod template back at the last good revision.

Prints p50/p95/max per kind and overall, and the health-check period for comparison (the goal
is well under one period beyond the threshold). No assertion: numbers only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from localcluster.operator_process import CRD_FILE, OperatorProcess  # noqa: E402
from localcluster.rollout_watch import RolloutWatch  # noqa: E402
from localcluster.waiting import wait_for  # noqa: E402

NAME = "bench"
NS = "rollback-bench"
SIMULATE = "causalflow.dev/simulate"
ROLLOUT = {
    "healthCheck": {"periodSeconds": 1, "failureThreshold": 2},
    "modelLoadTimeoutSeconds": 3,
    "progressDeadlineSeconds": 60,
    "settleSeconds": 8,
    "unschedulableGraceSeconds": 3,
    "maxRestarts": 3,
}
POLICY = {"modelLoadTimeoutSeconds": 3, "failureThreshold": 2, "periodSeconds": 1, "unschedulableGraceSeconds": 3}
KINDS = {
    # kind: (spec change for run i, reason the operator reports)
    "crashloop": (lambda i: {"podLabels": {SIMULATE: "crashloop", "bench-run": str(i)}}, "CrashLoopBackOff"),
    "image-pull-error": (lambda i: {"podLabels": {SIMULATE: "image-pull-error", "bench-run": str(i)}}, "ImagePullBackOff"),
    "never-ready": (lambda i: {"podLabels": {SIMULATE: "never-ready", "bench-run": str(i)}}, "ReadinessTimeout"),
    "flap": (lambda i: {"podLabels": {SIMULATE: "flap", "bench-run": str(i)}}, "ReadinessLost"),
    "unschedulable": (lambda i: {"podLabels": {"bench-run": str(i)},
                                 "resources": {"gpuResourceName": "nvidia.com/mig-3g.40gb"}}, "Unschedulable"),
    "oom-killed": (lambda i: {"podLabels": {SIMULATE: "oom-killed", "bench-run": str(i)}}, "OOMKilled"),
    "create-config-error": (lambda i: {"podLabels": {SIMULATE: "create-config-error", "bench-run": str(i)}},
                            "CreateContainerConfigError"),
}


class Kubectl:
    def __init__(self, cluster) -> None:
        self.cluster = cluster

    def __call__(self, *args: str, input: str | None = None) -> str:
        return self.cluster.kubectl(*args, input=input).stdout

    def status(self) -> dict:
        """The status once the operator handled the latest spec (observedGeneration), else {}."""
        obj = json.loads(self("get", "ocrs", NAME, "-n", NS, "-o", "json"))
        status = obj.get("status") or {}
        return status if status.get("observedGeneration") == obj["metadata"]["generation"] else {}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(cluster, runs: int, kinds: list[str], workdir: Path) -> int:
    from kubernetes import config

    k = Kubectl(cluster)
    k("apply", "--server-side", "--force-conflicts", "--field-manager=causalflow-bench", "-f", str(CRD_FILE))
    k("wait", "--for=condition=Established", "--timeout=60s", "crd/ocrservices.ocr.causalflow.dev")
    k("create", "namespace", NS)
    operator_kubeconfig = getattr(cluster, "operator_kubeconfig", cluster.kubeconfig)
    op = OperatorProcess(Path(operator_kubeconfig), [NS], workdir / "operator.log").start()
    kube = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        manifest = {
            "apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "metadata": {"name": NAME},
            "spec": {"image": "registry.invalid/causalflow/ocr-server:1.0.0", "replicas": 2,
                     "resources": {"gpus": 1, "cpu": "100m", "memory": "256Mi"},
                     "terminationGracePeriodSeconds": 0, "rollout": ROLLOUT},
        }
        k("apply", "-n", NS, "-f", "-", input=json.dumps(manifest))
        def healthy():
            s = k.status()
            return s.get("lastGoodRevision") if (s.get("rollout") or {}).get("phase") == "Healthy" else None

        good = wait_for(healthy, timeout=120, interval=0.25, message="the first revision to become good")
        print(f"good revision {good}; {runs} failing upgrades over {', '.join(kinds)}", flush=True)
        results: dict[str, list[float]] = {kind: [] for kind in kinds}
        min_old_ready = None
        seen_failed: set[str] = set()
        with RolloutWatch(kube, NS, NAME) as watch:
            for i in range(runs):
                kind = kinds[i % len(kinds)]
                change, reason = KINDS[kind]
                since = time.monotonic()
                patch = {"spec": {"podLabels": None, "resources": {"gpus": 1}}}
                patch["spec"].update(change(i))
                k("patch", "ocrs", NAME, "-n", NS, "--type", "merge", "-p", json.dumps(patch))
                # rolled back, and it is this run's revision that failed (desired == failed)
                def rolled_back():
                    s = k.status()
                    rolled = (s.get("rollout") or {}).get("phase") == "RolledBack"
                    fresh = s.get("failedRevision") not in seen_failed
                    return s if rolled and fresh and s.get("desiredRevision") == s.get("failedRevision") else None

                status = wait_for(rolled_back, timeout=60, interval=0.2, message=f"run {i} ({kind}) rolled back")
                failed = status["failedRevision"]
                seen_failed.add(failed)
                if status["failedReason"] != reason:
                    print(f"  run {i:3d} {kind:17s} reported {status['failedReason']} (expected {reason})")
                applied = wait_for(lambda: watch.rollback_applied(failed, good), timeout=10,
                                   message="rollback seen by the watch")
                signal = watch.failure_signal(failed, status["failedReason"], POLICY)
                latency = applied - signal
                results[kind].append(latency)
                old = watch.min_ready(good, since=since)
                min_old_ready = old if min_old_ready is None else min(min_old_ready, old)
                print(f"  run {i:3d} {kind:17s} {status['failedReason']:24s} signal -> rollback {latency * 1000:7.0f} ms"
                      f"   (old pods Ready, min: {old})", flush=True)
                # let the failed pods go before the next attempt (GPUs, clean watch state)
                wait_for(lambda: watch.pod_count(failed) == 0, timeout=30, interval=0.2, message="failed pods gone")
        print()
        print(f"{'kind':18s} {'n':>3s} {'p50 ms':>8s} {'p95 ms':>8s} {'max ms':>8s}")
        everything: list[float] = []
        for kind, values in results.items():
            if values:
                everything += values
                print(f"{kind:18s} {len(values):3d} {pct(values, .5) * 1000:8.0f} {pct(values, .95) * 1000:8.0f} "
                      f"{max(values) * 1000:8.0f}")
        print(f"{'all':18s} {len(everything):3d} {pct(everything, .5) * 1000:8.0f} {pct(everything, .95) * 1000:8.0f} "
              f"{max(everything) * 1000:8.0f}   (mean {statistics.mean(everything) * 1000:.0f})")
        print(f"health-check period: {ROLLOUT['healthCheck']['periodSeconds'] * 1000} ms; "
              f"fewest old pods Ready during any failing upgrade: {min_old_ready} of 2")
        return 0
    finally:
        op.stop()
        kube.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--kinds", default="crashloop,image-pull-error,never-ready,unschedulable,flap,oom-killed,create-config-error")
    p.add_argument("--kubeconfig", help="use this running cluster instead of starting the local one")
    args = p.parse_args(argv)
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kinds {unknown}; choose from {sorted(KINDS)}")
    workdir = Path(tempfile.mkdtemp(prefix="rollback-bench-"))
    if args.kubeconfig:
        from localcluster.external import ExternalCluster

        return run(ExternalCluster(Path(args.kubeconfig)), args.runs, kinds, workdir)
    from localcluster.cluster import LocalCluster

    with LocalCluster() as cluster:
        print(f"local control plane up in {cluster.started_seconds:.1f}s", flush=True)
        return run(cluster, args.runs, kinds, workdir)


if __name__ == "__main__":
    sys.exit(main())
