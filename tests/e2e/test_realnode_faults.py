"""Faults on the REAL node while requests flow, each against what the product promises.

Node: every server pod here runs on `real-node-0` (the test image: the product's server with its
test helpers, the tiny random model from the tiny-model PVC, on the CPU); the operator runs as a local process. One OcrService,
`faulty`, serves the whole module (two pods take 30-60 s to start on this machine), and each test
first brings it to the spec it needs (`Faulty.ensure`), so any test also runs alone.

The spec keeps the product's stop sequence: terminationGracePeriodSeconds above the preStop sleep
(so the endpoint goes before SIGTERM), and the grace period the operator derives from
`inference.timeoutSeconds` (the server's graceful shutdown waits TIMEOUT_SEC + 5 for requests in
flight). Requests go to the Service's ClusterIP, or to a pod's IP when a test must know which pod
serves it, on the harness's bridge; no request is retried, every outcome is recorded.

- scale-down 2 -> 1 and a rollout (an env change) each delete a pod with requests in flight:
  every request sent meanwhile is answered 200, among them one that runs on the deleted pod more
  than 10 s past its SIGTERM (its decode steps paced by the fault plugin's OCR_STEP_PAUSE_SEC, so it
  is that long on an idle machine too);
- the engine thread wedged (SERVER_PLUGINS=ocr_server_testing.faults, the test image's fault plugin): liveness restarts the pod and the
  operator keeps its revision good, also when the spec goes back to it later;
- containerd restarted: the containers keep running under their shims and serving, every request
  is answered 200, and the node and the pod are Ready afterwards.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
import uuid
from dataclasses import dataclass

import pytest

from localcluster.operator_process import OperatorProcess
from localcluster.nodeconfig import NODE_NAME
from localcluster.waiting import wait_for
from ocr_operator.ocrservice.render.deployment import CONTAINER, PRESTOP_SLEEP_SECONDS
from tests.e2e.operator_fixtures import OcrHelpers, operator_kubeconfig, operator_log_if_the_test_fails
from tests.e2e.realnode_fixtures import (OcrClient, paced_steps_env, pod_ready, real_ocrservice, server_pods,
                                         service_client, tiny_model_claim)
from tests.server import samples

# The last test restarts the node's containerd: marked `exclusive`, it runs while no other worker's
# test does (tests/e2e/conftest.py), the others beside them.
pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "faulty"
PORT = 8080
SHORT_TOKENS = 8  # about 1 s on this machine
# A long request must outlast the old fixed 10 s graceful shutdown past its pod's SIGTERM, which
# comes 2 s (settleSeconds) + the preStop sleep after it starts: so it is sized to take about
# LONG_TARGET_SECONDS on the machine as it is, from a timed request (`Faulty.long_tokens`), not by a
# fixed count: 640 tokens took 90 s on a busy machine with the generate decoder and 6 s idle with
# the slots decoder. `min_new_tokens` holds the end of text back, so it generates that many. The
# tiny model's context caps the tokens (an idle machine decodes all of them in about 16 s), so the
# fault plugin paces each decode step by STEP_PAUSE_SEC (as a slower accelerator would): a step
# then waits about ten times as long as it computes, so a long request is about 450 tokens and
# the pods' CPU goes to what the tests are about, not to keeping requests long.
LONG_SECONDS, LONG_TARGET_SECONDS = 10, 25
STEP_PAUSE_SEC = 0.05
PROBE_TOKENS, LONG_MAX_TOKENS = 64, 3584  # the tiny model's context is 4096
# The pauses alone make a request of LONG_MIN_TOKENS outlast what `_mid_request` asks, however the
# machine's load moves between the probe and the request: its pod's deletion comes up to ~3 s into
# it (settleSeconds 2, the watch's poll), the SIGTERM the preStop sleep later, then LONG_SECONDS,
# with 2 s to spare. A probe timed on a busier moment sized one 165 tokens, which then ran 15.5 s
# and ended 13.2 s after the deletion (2 s short). The floor wins over the probe's cap.
LONG_MIN_TOKENS = math.ceil((3 + PRESTOP_SLEEP_SECONDS + LONG_SECONDS + 2) / STEP_PAUSE_SEC)
LONG_TIMEOUT = 120  # inference.timeoutSeconds while long requests run: the pod's grace period is 5 + 125 s
SHORT_TIMEOUT, STALL_SEC = 10, 5  # after the rollout: a wedged pod is restarted within ~30 s
MAX_REQUESTS, MAX_SECONDS = 300, 300  # each load loop's bound
PROBE_SEEDS = itertools.count(90_000)  # a page never sent before: a result-cache hit would time nothing


def manifest(image: str, pvc: str, *, replicas: int, timeout: int, stall: int | None = None,
             extra_env: dict[str, str] | None = None) -> dict:
    env = {**paced_steps_env(STEP_PAUSE_SEC),
           **({"LIVENESS_STALL_SEC": str(stall)} if stall else {}), **(extra_env or {})}
    return real_ocrservice(
        NAME, image, replicas=replicas, model={"pvc": {"claimName": pvc, "subPath": "weights"}},
        inference={"maxNewTokens": LONG_MAX_TOKENS, "timeoutSeconds": timeout, "concurrency": 2},
        env=[{"name": k, "value": v} for k, v in env.items()],
        # 0: any restart fails a NEW revision, so a liveness restart judged as one would show.
        rollout={"maxRestarts": 0},
        terminationGracePeriodSeconds=PRESTOP_SLEEP_SECONDS + 1)  # > the preStop sleep: it is kept


@dataclass
class Outcome:
    start: float
    end: float
    code: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.code == 200


def ocr_once(client: OcrClient, seed: int, tokens: int, exact: bool = False) -> Outcome:
    """One request of at most `tokens` new tokens (exactly that many with `exact`)."""
    t0 = time.monotonic()
    held = {"min_new_tokens": str(tokens)} if exact else {}
    try:  # a new page each time: no result-cache hit
        r = client.ocr(samples.png(320, 240, seed=seed), max_new_tokens=str(tokens), **held)
        return Outcome(t0, time.monotonic(), r.status_code, "" if r.status_code == 200 else r.text[:200])
    except Exception as exc:  # noqa: BLE001 - a failed request is the finding
        return Outcome(t0, time.monotonic(), None, f"{type(exc).__name__}: {exc}")


class Load(threading.Thread):
    """Short OCR requests one after another through `client` until stopped, at most MAX_REQUESTS
    or MAX_SECONDS; every outcome kept."""

    def __init__(self, client: OcrClient, seed: int) -> None:
        super().__init__(daemon=True)
        self.client, self.seed = client, seed
        self.stop_event = threading.Event()
        self.outcomes: list[Outcome] = []

    def run(self) -> None:
        deadline = time.monotonic() + MAX_SECONDS
        for i in range(MAX_REQUESTS):
            if self.stop_event.is_set() or time.monotonic() > deadline:
                return
            self.outcomes.append(ocr_once(self.client, self.seed + i, SHORT_TOKENS))
            time.sleep(0.1)

    def ok_count(self) -> int:
        return sum(o.ok for o in self.outcomes)

    def await_answers(self, more: int, after_what: str) -> None:
        """Wait until `more` requests from now are answered, or any request has failed."""
        after = self.ok_count()
        wait_for(lambda: self.ok_count() >= after + more or any(not o.ok for o in self.outcomes), timeout=120,
                 message=f"{more} more answers after {after_what}")

    def finish(self) -> list[Outcome]:
        self.stop_event.set()
        self.join(timeout=150)
        self.client.close()
        return self.outcomes

    def codes(self) -> dict[str, int]:
        """How many requests ended how: the HTTP status, or the exception's name."""
        out: dict[str, int] = {}
        for o in self.outcomes:
            key = str(o.code) if o.code is not None else o.error.split(":")[0]
            out[key] = out.get(key, 0) + 1
        return out


class LongRequest(threading.Thread):
    """One request of exactly `tokens` new tokens straight to one pod's IP."""

    def __init__(self, pod: dict, seed: int, tokens: int) -> None:
        super().__init__(daemon=True)
        self.pod_name, self.seed, self.tokens = pod["metadata"]["name"], seed, tokens
        self.client = OcrClient(pod["status"]["podIP"], PORT, timeout=LONG_TIMEOUT + 30)
        self.outcome: Outcome | None = None
        self.start()

    def run(self) -> None:
        self.outcome = ocr_once(self.client, self.seed, self.tokens, exact=True)
        self.client.close()

    def result(self) -> Outcome:
        self.join(timeout=LONG_TIMEOUT + 60)
        assert self.outcome is not None, f"the long request to {self.pod_name} did not return"
        return self.outcome


class PodWatch(threading.Thread):
    """When each of the OcrService's pods was first seen deleting and gone (polled every 0.5 s)."""

    def __init__(self, cluster, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.stop_event = threading.Event()
        self.deleting: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self.start()

    def run(self) -> None:
        seen: set[str] = set()
        while not self.stop_event.is_set():
            try:
                pods = server_pods(self.cluster, self.namespace, NAME)
            except Exception:  # noqa: BLE001 - one failed poll is retried
                time.sleep(0.5)
                continue
            now = time.monotonic()
            names = {p["metadata"]["name"] for p in pods}
            for p in pods:
                if p["metadata"].get("deletionTimestamp"):
                    self.deleting.setdefault(p["metadata"]["name"], now)
            for name in seen - names:
                self.gone.setdefault(name, now)
            seen |= names
            time.sleep(0.5)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=30)


class Faulty:
    """The module's OcrService: its operator, its spec, its pods and its status."""

    def __init__(self, cluster, namespace: str, operator: OperatorProcess, image: str, pvc: str) -> None:
        self.cluster, self.namespace, self.operator, self.image, self.pvc = cluster, namespace, operator, image, pvc
        self.ocr = OcrHelpers(cluster, namespace)

    def manifest(self, **kw) -> dict:
        return manifest(self.image, self.pvc, **kw)

    def ensure(self, manifest_: dict, timeout: float = 300) -> dict:
        """Apply (a no-op when unchanged) and wait until settled: Ready, Healthy, the Deployment at
        the desired revision and exactly `replicas` pods, none leaving. Returns the status."""
        self.ocr.apply(manifest_)
        replicas = manifest_["spec"]["replicas"]

        def settled() -> dict | None:
            obj = self.ocr.ready(NAME)
            st = (obj or {}).get("status") or {}
            pods = self.pods()
            if (obj and st.get("rollout", {}).get("phase") == "Healthy" and st.get("currentRevision") == st.get("desiredRevision")
                    and len(pods) == replicas and all(pod_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)):
                return st
            return None

        return wait_for(settled, timeout=timeout, interval=0.5, message=f"OcrService {NAME} settled at {replicas} pods")

    def status(self) -> dict:
        return (self.ocr.get("ocrs", NAME) or {}).get("status") or {}

    def pods(self) -> list[dict]:
        return server_pods(self.cluster, self.namespace, NAME)

    def pod(self, name: str) -> dict | None:
        return next((p for p in self.pods() if p["metadata"]["name"] == name), None)

    def load(self, seed: int) -> Load:
        load = Load(service_client(self.cluster, self.namespace, NAME, timeout=LONG_TIMEOUT + 30), seed)
        load.start()
        wait_for(lambda: load.ok_count() >= 2 or any(not o.ok for o in load.outcomes), timeout=120,
                 message="the load's first answers")
        return load

    def long_tokens(self, pod: dict) -> int:
        """How many new tokens take about LONG_TARGET_SECONDS on `pod` now: PROBE_TOKENS timed on a
        new page, scaled up (a step's cost grows with the sequence, so a long request runs longer)."""
        client = OcrClient(pod["status"]["podIP"], PORT, timeout=LONG_TIMEOUT + 30)
        try:
            probe = ocr_once(client, seed=next(PROBE_SEEDS), tokens=PROBE_TOKENS, exact=True)
        finally:
            client.close()
        assert probe.ok, probe
        # At most LONG_MAX_TOKENS, and never past half the request deadline at the probe's pace;
        # at least LONG_MIN_TOKENS.
        cap = min(LONG_MAX_TOKENS, round(PROBE_TOKENS * LONG_TIMEOUT / 2 / (probe.end - probe.start)))
        tokens = round(PROBE_TOKENS * LONG_TARGET_SECONDS / (probe.end - probe.start))
        tokens = max(min(tokens, cap), LONG_MIN_TOKENS)
        print(f"\n{PROBE_TOKENS} tokens took {probe.end - probe.start:.1f}s: a long request is {tokens} tokens")
        return tokens

    def rollout_warnings(self) -> list[str]:
        return [f"{e['reason']}: {e['message']}" for e in self.ocr.events(NAME)
                if e["reason"] in ("RolledBack", "RolloutFailed", "NoGoodRevision", "RollbackRefused")]


@pytest.fixture(scope="module")
def faulty(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    namespace = f"t-realnode-faults-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    log = tmp_path_factory.mktemp("faults") / "operator.log"
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], log)
    try:
        cluster.wait_default_serviceaccount(namespace)
        # The test image: the product's server with the test helpers (the wedge fault plugin).
        image = product_images.on_node("server_tiny")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as pvc:
            service = Faulty(cluster, namespace, op, image, pvc)
            t0 = time.monotonic()
            service.ensure(service.manifest(replicas=2, timeout=LONG_TIMEOUT))
            print(f"\nOcrService {NAME} (2 pods) applied -> settled: {time.monotonic() - t0:.1f}s")
            yield service
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request, faulty):
    with operator_log_if_the_test_fails(request, faulty.operator):
        yield


def _mid_request(long: Outcome, deleting_at: float, past_sigterm: float = 1) -> None:
    """The request was in flight at its pod's SIGTERM, which comes the preStop sleep after the
    deletion: sent before it and answered at least `past_sigterm` seconds after it, with a second
    to spare for the polling that saw the deletion (at `deleting_at`, up to a second late)."""
    assert long.ok, long
    assert long.start < deleting_at + PRESTOP_SLEEP_SECONDS - 1, (long, deleting_at)
    assert long.end >= deleting_at + PRESTOP_SLEEP_SECONDS + past_sigterm, (
        f"the request ended {long.end - deleting_at:.1f}s after its pod's deletion, less than {past_sigterm}s "
        f"after its SIGTERM ({PRESTOP_SLEEP_SECONDS}s preStop): it does not show what the test is about")


def test_scaling_down_deletes_a_pod_mid_request_and_every_request_is_answered(faulty):
    t_test = time.monotonic()
    faulty.ensure(faulty.manifest(replicas=2, timeout=LONG_TIMEOUT))
    revision = faulty.status()["currentRevision"]
    pods = faulty.pods()
    watch = PodWatch(faulty.cluster, faulty.namespace)
    load = faulty.load(seed=1000)
    try:
        tokens = faulty.long_tokens(pods[0])
        longs = {p["metadata"]["name"]: LongRequest(p, seed=10 + i, tokens=tokens) for i, p in enumerate(pods)}
        time.sleep(1)  # both long requests are generating
        faulty.ocr.patch("ocrs", NAME, {"spec": {"replicas": 1}})
        victim = wait_for(lambda: next(iter(watch.gone), None), timeout=LONG_TIMEOUT + 60, interval=0.5,
                          message="a pod deleted by the scale-down and gone")
        outcomes = {name: r.result() for name, r in longs.items()}
        st = faulty.ensure(faulty.manifest(replicas=1, timeout=LONG_TIMEOUT))
        load.await_answers(3, "the scale-down")
    finally:
        load.finish()
        watch.stop()
    long = outcomes[victim]
    print(f"\nscale-down 2 -> 1: pod {victim} deleted {watch.deleting[victim] - long.start:.1f}s into its long request, "
          f"which answered {long.code} after {long.end - long.start:.1f}s ({long.end - watch.deleting[victim]:.1f}s after "
          f"the deletion), pod gone {watch.gone[victim] - watch.deleting[victim]:.1f}s after it; load {load.codes()}; "
          f"long requests {[o.code for o in outcomes.values()]}; test {time.monotonic() - t_test:.1f}s")
    assert [o for o in load.outcomes if not o.ok] == []
    assert all(o.ok for o in outcomes.values()), outcomes
    _mid_request(long, watch.deleting[victim])
    assert watch.gone[victim] >= long.end - 0.5, "the pod went before its request was answered"
    assert st["currentRevision"] == revision and faulty.rollout_warnings() == []


def test_a_rollout_replaces_a_pod_mid_request_and_a_long_request_on_it_completes(faulty):
    t_test = time.monotonic()
    faulty.ensure(faulty.manifest(replicas=1, timeout=LONG_TIMEOUT))
    before = faulty.status()["currentRevision"]
    [old] = faulty.pods()
    old_name = old["metadata"]["name"]
    tokens = faulty.long_tokens(old)
    watch = PodWatch(faulty.cluster, faulty.namespace)
    load = faulty.load(seed=2000)
    try:
        t_change = time.monotonic()
        # The env change (and the shorter timeout the wedge test restarts quickly with).
        faulty.ocr.apply(faulty.manifest(replicas=1, timeout=SHORT_TIMEOUT, stall=STALL_SEC))
        wait_for(lambda: any(p["metadata"]["name"] != old_name and pod_ready(p) for p in faulty.pods()),
                 timeout=300, interval=0.5, message="the new revision's pod Ready")
        t_new_ready = time.monotonic()
        long_request = LongRequest(old, seed=20, tokens=tokens)  # the old pod is deleted 2 s (settleSeconds) from now
        wait_for(lambda: old_name in watch.gone, timeout=LONG_TIMEOUT + 60, interval=0.5,
                 message=f"the old pod {old_name} deleted and gone")
        long = long_request.result()
        st = faulty.ensure(faulty.manifest(replicas=1, timeout=SHORT_TIMEOUT, stall=STALL_SEC))
        load.await_answers(3, "the rollout")
    finally:
        load.finish()
        watch.stop()
    during = [o for o in load.outcomes if t_change <= o.start <= watch.gone.get(old_name, float("inf"))]
    print(f"\nrollout (env change): new pod Ready {t_new_ready - t_change:.1f}s after the change; old pod {old_name} "
          f"deleted {watch.deleting[old_name] - long.start:.1f}s into the long request, which answered {long.code} after "
          f"{long.end - long.start:.1f}s; pod gone {watch.gone[old_name] - watch.deleting[old_name]:.1f}s after its "
          f"deletion; load {load.codes()} ({len(during)} sent during the rollout); test {time.monotonic() - t_test:.1f}s")
    assert [o for o in load.outcomes if not o.ok] == []
    assert during, "no request was sent while the rollout replaced the pod"
    assert long.end - long.start > LONG_SECONDS, f"the long request took {long.end - long.start:.1f}s only"
    _mid_request(long, watch.deleting[old_name], past_sigterm=LONG_SECONDS)  # longer than the old fixed 10 s
    assert watch.gone[old_name] >= long.end - 0.5, "the pod went before its long request was answered"
    assert st["currentRevision"] != before and st["lastGoodRevision"] == st["currentRevision"]
    assert faulty.rollout_warnings() == []


def _liveness_kills(faulty, pod: str) -> list[str]:
    events = faulty.cluster.list_objects("events", faulty.namespace, fields=f"involvedObject.name={pod},reason=Killing")
    return [e["message"] for e in events if "failed liveness probe" in e["message"]]


def test_a_wedged_engine_is_restarted_by_liveness_and_its_good_revision_stays_good(faulty):
    t_test = time.monotonic()
    good_spec = faulty.manifest(replicas=1, timeout=SHORT_TIMEOUT, stall=STALL_SEC)
    st = faulty.ensure(good_spec)
    good = st["currentRevision"]
    assert st["lastGoodRevision"] == good
    [pod] = faulty.pods()
    name = pod["metadata"]["name"]
    restarts = pod["status"]["containerStatuses"][0]["restartCount"]
    faulty.cluster.kubectl("exec", name, "-n", faulty.namespace, "-c", CONTAINER, "--", "touch", "/tmp/ocr-wedge")
    client = OcrClient(pod["status"]["podIP"], PORT, timeout=60)
    try:
        wedged = ocr_once(client, seed=30, tokens=SHORT_TOKENS)  # its batch starts the hang
    finally:
        client.close()
    restarted = wait_for(lambda: (p := faulty.pod(name)) and p["status"]["containerStatuses"][0]["restartCount"] > restarts
                         and p, timeout=180, interval=0.5, message=f"pod {name} restarted")
    t_restarted = time.monotonic()
    wait_for(lambda: pod_ready(faulty.pod(name) or {}), timeout=180, interval=0.5, message=f"pod {name} Ready again")
    t_ready = time.monotonic()
    st = faulty.ensure(good_spec, timeout=60)
    print(f"\nwedge: request answered {wedged.code} after {wedged.end - wedged.start:.1f}s (TIMEOUT_SEC {SHORT_TIMEOUT}); "
          f"container restarted {t_restarted - wedged.start:.1f}s after the hang began (LIVENESS_STALL_SEC {STALL_SEC}, "
          f"3 x 1 s probes, {PRESTOP_SLEEP_SECONDS}s preStop, grace "
          f"{restarted['spec']['terminationGracePeriodSeconds']}s), Ready again {t_ready - t_restarted:.1f}s later")
    assert wedged.code == 504, wedged  # answered at its deadline, never hung
    assert _liveness_kills(faulty, name), "the kubelet's Killing event names no liveness failure"
    assert st["currentRevision"] == good and st["lastGoodRevision"] == good and not st.get("failedRevision")
    assert faulty.ocr.condition(faulty.ocr.get("ocrs", NAME), "Degraded")["status"] == "False"
    assert faulty.rollout_warnings() == []

    # The spec moves on to a revision whose pod never gets Ready, then goes back to the good one:
    # its restarted pod (restarts 1 > maxRestarts 0) is judged again, and must still be good.
    faulty.ocr.apply(faulty.manifest(replicas=1, timeout=SHORT_TIMEOUT, stall=STALL_SEC,
                                     extra_env={"LOAD_DELAY_SEC": "600"}))
    wait_for(lambda: faulty.status().get("rollout", {}).get("currentRevision") not in (None, good), timeout=60,
             interval=0.5, message="the operator rolling out the next revision")
    t_back = time.monotonic()
    st = faulty.ensure(good_spec, timeout=120)
    print(f"back to the good revision with its restarted pod: Healthy again in {time.monotonic() - t_back:.1f}s; "
          f"test {time.monotonic() - t_test:.1f}s")
    assert st["currentRevision"] == good and st["lastGoodRevision"] == good and not st.get("failedRevision")
    assert faulty.ocr.condition(faulty.ocr.get("ocrs", NAME), "Degraded")["status"] == "False"
    assert [p["metadata"]["name"] for p in faulty.pods()] == [name]
    assert faulty.rollout_warnings() == []


def _node_ready(cluster) -> dict:
    node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


@pytest.mark.exclusive
def test_restarting_containerd_keeps_the_pods_serving_and_the_node_ready(faulty, cluster, real_node):
    t_test = time.monotonic()
    faulty.ensure(faulty.manifest(replicas=1, timeout=SHORT_TIMEOUT, stall=STALL_SEC))
    [pod] = faulty.pods()
    container = pod["status"]["containerStatuses"][0]
    ready_before = _node_ready(cluster)
    load = faulty.load(seed=4000)
    try:
        t0 = time.monotonic()
        took = real_node.restart_containerd(cluster)
        load.await_answers(5, "containerd came back")
        time.sleep(10)  # a kubelet sync and a node-status round (5 s) later
        wait_for(lambda: _node_ready(cluster)["status"] == "True", timeout=60, message=f"{NODE_NAME} Ready")
        now = wait_for(lambda: (p := faulty.pod(pod["metadata"]["name"])) and pod_ready(p) and p, timeout=60,
                       message="the pod Ready")
        running = real_node.crictl("ps", "-q", "--state", "running").stdout.split()
    finally:
        load.finish()
    during = [o for o in load.outcomes if o.end >= t0 and o.start <= t0 + took]
    ready_after = _node_ready(cluster)
    stayed = ready_after["lastTransitionTime"] == ready_before["lastTransitionTime"]
    print(f"\ncontainerd restart: answering again after {took:.1f}s; load {load.codes()} ({len(during)} in flight or "
          f"sent while it was down); node Ready {'throughout' if stayed else 'again, after a transition'}; "
          f"test {time.monotonic() - t_test:.1f}s")
    assert [o for o in load.outcomes if not o.ok] == []
    assert during, "no request was in flight while containerd restarted"
    now_container = now["status"]["containerStatuses"][0]
    assert now_container["containerID"] == container["containerID"]
    assert now_container["restartCount"] == container["restartCount"]
    assert container["containerID"].split("//")[-1] in running  # the new containerd found it under its shim
    assert ready_after["status"] == "True"
