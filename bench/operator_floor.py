"""The operator benchmark's two floors (bench/operator_bench.py): the children written directly
with no operator (`measure_floor`), and the writes any operator of this API makes for a new
object, issued directly with no reconciling (`measure_api_floor`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.operator_observe import CLIENT_THREADS, FLOOR_NAMESPACE, Watcher, manifest, summary

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

