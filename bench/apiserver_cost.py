"""What one API request of each kind the operator sends costs the control plane, in CPU.

Issues N requests of one kind at a time (20 in flight, the operator's client), on an otherwise
idle local cluster, and divides the CPU-seconds kube-apiserver and etcd used meanwhile (read
from /proc, 2 s after the last answer so the watch fan-out counts too) by N:

- ``configmap-apply``: server-side apply of a new ConfigMap (a child, as the floor writes it);
- ``configmap-reapply``: the same apply again, unchanged;
- ``ocrservice-create``: the OcrService create a user's `kubectl apply` makes;
- ``ocrservice-status``: a merge patch of the operator's whole status (its shape and size);
- ``ocrservice-status-small``: a merge patch of one status field;
- ``event``: an Event create.

Why: on a machine whose cores the control plane already fills (the operator bench on 2 cores),
the operator's phase is as long as the CPU its writes cost, and a custom resource's write goes
through more than a core kind's (the stored JSON is decoded, coerced to the CRD's structural
schema and defaulted, validated with its OpenAPI and CEL rules, its managed fields updated,
encoded again). Not a test: nothing is asserted.

    .venv/bin/python bench/apiserver_cost.py                 # starts its own local cluster
    .venv/bin/python bench/apiserver_cost.py --attach DIR --count 500
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "operator")]

from bench.operator_bench import cpu_seconds, manifest, stage_status  # noqa: E402
from localcluster.operator_process import CRD_FILE  # noqa: E402

NAMESPACE = "ocr-bench-cost"
IN_FLIGHT = 20
KINDS = ("configmap-apply", "configmap-reapply", "ocrservice-create", "ocrservice-status",
         "ocrservice-status-small", "event")


def configmap(i: int) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cost-{i}", "namespace": NAMESPACE, "labels": {"app": "cost"}},
            "data": {"config.yaml": "key: value\n" * 40}}


def requests_for(kind: str, kube, stored: dict[int, dict]):
    """The coroutine factory that sends request `i` of `kind`."""
    if kind in ("configmap-apply", "configmap-reapply"):
        return lambda i: kube.apply(configmap(i))
    if kind == "ocrservice-create":
        async def create(i: int) -> None:
            body = manifest(f"cost-{i}")
            body["metadata"]["namespace"] = NAMESPACE
            stored[i] = await kube.create("OcrService", NAMESPACE, body)
        return create
    if kind == "ocrservice-status":  # a fresh timestamp: every patch changes the object
        return lambda i: kube.merge_patch("OcrService", NAMESPACE, f"cost-{i}",
                                          {"status": stage_status("ready", stored[i], time.time())},
                                          subresource="status")
    if kind == "ocrservice-status-small":
        return lambda i: kube.merge_patch("OcrService", NAMESPACE, f"cost-{i}",
                                          {"status": {"gpuUtilization": f"{time.time():.6f}/4"}}, subresource="status")
    if kind == "event":  # the body the operator posts
        from ocr_operator.runtime.events import post_event

        return lambda i: post_event(kube, stored.get(i) or {"metadata": {"name": f"cost-{i}", "namespace": NAMESPACE}},
                                    "Normal", "RolloutStarted", "cost", dt.datetime.now(dt.timezone.utc))
    raise ValueError(kind)


async def measure(kubeconfig: Path, pids: dict[str, int], count: int, kinds: list[str]) -> dict:
    from lightkube.config.kubeconfig import KubeConfig

    from ocr_operator import wiring

    kube = wiring.client(KubeConfig.from_file(str(kubeconfig)))
    gate = asyncio.Semaphore(IN_FLIGHT)
    stored: dict[int, dict] = {}
    out = {}
    try:
        for kind in kinds:
            send = requests_for(kind, kube, stored)

            async def one(i: int) -> None:
                async with gate:
                    await send(i)
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            t0 = time.monotonic()
            await asyncio.gather(*(one(i) for i in range(count)))
            wall = time.monotonic() - t0
            await asyncio.sleep(2.0)
            ms = {name: round((cpu_seconds(pid) - before[name]) * 1000 / count, 2) for name, pid in pids.items()}
            out[kind] = {"wall_seconds": round(wall, 2), "cpu_ms_per_request": ms}
            print(f"{kind:25s} {wall:6.2f} s for {count}; CPU ms per request: "
                  + ", ".join(f"{k} {v}" for k, v in ms.items()), flush=True)
    finally:
        await kube.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--attach", type=Path, help="work dir of a running LocalCluster (else start one)")
    ap.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS),
                    help="ocrservice-status* need ocrservice-create before them")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()

    from localcluster.cluster import LocalCluster

    own = args.attach is None
    cluster = LocalCluster(real_node=False, metric_chain=False).start() if own else LocalCluster.attach(args.attach)
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
        cluster.kubectl("wait", "--for=condition=Established", "crd/ocrservices.ocr.causalflow.dev")
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=300s")
        cluster.kubectl("create", "namespace", NAMESPACE)
        pids = {name: pid for name, pid in cluster.pids.items() if name in ("apiserver", "etcd")}
        figures = asyncio.run(measure(Path(cluster.kubeconfig), pids, args.count, args.kinds))
        cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        if args.json:
            args.json.write_text(json.dumps({"count": args.count, "in_flight": IN_FLIGHT, "kinds": figures}, indent=2))
    finally:
        if own:
            cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
