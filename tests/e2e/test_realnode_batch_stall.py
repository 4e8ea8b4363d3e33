"""A stalled worker on the REAL node: its process is frozen (SIGSTOP on the node) mid-batch, the
operator finds that its progress has not moved for spec.stallSeconds, deletes its pod (a Warning
event and the Stalled condition naming the index and the pod), the Job runs the index again, and
the batch ends Succeeded with every page's result exactly once.

A corpus of single-page PNGs (one index) runs against one OcrService, its worker frozen once a few
documents are done. What the stall cost is the time the index did no work, from the freeze until
its new pod runs (measured directly: the difference to an undisturbed run's duration, which an
earlier version also ran, says the same on a quiet machine and is noise under other load). The frozen process is the
worker container's own (its PID from `crictl inspect` of the pod's container, checked against its
cgroup); the kubelet kills it when the pod's grace period ends (a stopped process never handles
SIGTERM), and the test resumes and kills it itself only if it is still there at the end. The
kubelet may report the deleted pod Failed before that (seen: 12 s after the deletion, its process
still there), so the Job's next pod can run beside the frozen one for a while: the shard's output
stays whole (each object written whole, each pod's progress its own). The operator is a local
process reading progress every 2 s (as tests/e2e/test_realnode_batch.py runs it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path

import pytest

from localcluster.waiting import wait_for
from tests.e2e.batch_support import batch_operator, wait_server_pod_ready, worker_pods
from tests.e2e.operator_fixtures import OcrHelpers, print_operator_log
from tests.e2e.realnode_fixtures import hostpath_claim, real_ocrservice, tiny_model_claim
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(1800)]

NAME = "stalling"
BATCH = "stalled"
DOCUMENTS = 48  # most of them after the freeze: the new pod must make progress the operator reads
STALL_SECONDS = 12  # spec.stallSeconds (its minimum is 10)
READ_SECONDS = 2  # the operator's progress interval (OCR_OPERATOR_BATCH_PROGRESS_SECONDS)
FREEZE_AFTER = 4  # results written before the worker is frozen: mid-batch


def write_corpus(folder: Path) -> None:
    folder.mkdir(parents=True)
    for i in range(DOCUMENTS):
        (folder / f"p{i:03d}.png").write_bytes(samples.png(160, 120, seed=100 + i))


def spec() -> dict:
    return {"service": NAME, "input": {"pvc": {"claimName": "stall-data", "path": "/in"}},
            "output": {"pvc": {"claimName": "stall-data", "path": "/out"}},
            "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 1, "concurrencyPerWorker": 2,
            "stallSeconds": STALL_SECONDS}


def proc_start(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/<pid>/stat): with the PID, who it is."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Frozen:
    """The worker container's main process, stopped with SIGSTOP; thawed and killed at the end
    only if it is still the same process (its PID and start time)."""

    def __init__(self, real_node, pod: dict) -> None:
        self.container = pod["status"]["containerStatuses"][0]["containerID"].split("//")[-1]
        info = json.loads(real_node.crictl("inspect", self.container).stdout)
        self.pid = int(info["info"]["pid"])
        cgroup = Path(f"/proc/{self.pid}/cgroup").read_text()
        assert self.container in cgroup, f"PID {self.pid} is not in container {self.container}'s cgroup: {cgroup}"
        self.start = proc_start(self.pid)
        os.kill(self.pid, signal.SIGSTOP)
        self.at = time.monotonic()

    def alive(self) -> bool:
        return self.start is not None and proc_start(self.pid) == self.start

    def release(self) -> None:
        if self.alive():
            for sig in (signal.SIGCONT, signal.SIGKILL):
                os.kill(self.pid, sig)


class Freezer(threading.Thread):
    """Freezes the batch's running worker once FREEZE_AFTER results are written (the output folder
    polled every 50 ms: the batch is fast, a kubectl round trip is not)."""

    def __init__(self, cluster, real_node, namespace: str, batch: str, results_dir: Path) -> None:
        super().__init__(daemon=True)
        self.args = (cluster, real_node, namespace, batch, results_dir)
        self.frozen: Frozen | None = None
        self.pod: dict | None = None
        self.results_at_freeze = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        cluster, real_node, namespace, batch, results_dir = self.args
        try:
            while not self.stop.wait(0.05):
                if len(list(results_dir.glob("*.jsonl"))) < FREEZE_AFTER:
                    continue
                (self.pod,) = [p for p in worker_pods(cluster, namespace, batch)
                               if running(p) and not p["metadata"].get("deletionTimestamp")]
                self.frozen = Frozen(real_node, self.pod)
                self.results_at_freeze = len(list(results_dir.glob("*.jsonl")))
                return
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test's thread
            self.error = exc


def running(pod: dict) -> bool:
    return any("running" in (cs.get("state") or {}) for cs in pod.get("status", {}).get("containerStatuses", []))


def results(out: Path) -> dict[str, list[int]]:
    """document -> the pages of its result file(s), every file's lines read whole."""
    found: dict[str, list[int]] = {}
    for path in (out / "results").glob("*.jsonl"):
        document = re.sub(r"\.[0-9a-f]{16}\.jsonl$", "", path.name)
        found.setdefault(document, []).extend(json.loads(line)["page"] for line in path.read_text().splitlines())
    return found


@pytest.fixture(scope="module")
def ran(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    namespace = f"t-realnode-stall-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("stall")
    data = Path(cluster.workdir) / f"stall-data-{namespace}"
    write_corpus(data / "in")
    (data / "out").mkdir()
    for path in [data, *data.rglob("*")]:  # the workers run as uid 65532; hostPath keeps the modes
        path.chmod(0o777 if path.is_dir() and path.name.startswith("out") else 0o755 if path.is_dir() else 0o644)
    op = batch_operator(cluster, namespace, workdir / "operator.log", product_images, READ_SECONDS)
    ocr = OcrHelpers(cluster, namespace)
    freezer = Freezer(cluster, real_node, namespace, BATCH, data / "out" / "results")
    try:
        cluster.wait_default_serviceaccount(namespace)
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            hostpath_claim(cluster, namespace, data, "stall-data", "ReadWriteOnce", f"stall-data-{namespace}")
            ocr.apply(real_ocrservice(NAME, product_images.on_node("server"),
                                      model={"pvc": {"claimName": model, "subPath": "weights"}}))
            wait_server_pod_ready(cluster, namespace, NAME)

            seen: dict = {"conditions": [], "pods": {}}

            def watch(st: dict) -> None:
                now = time.monotonic()
                if freezer.error is not None:
                    raise freezer.error
                cond = next((c for c in st.get("conditions") or () if c["type"] == "Stalled"), None)
                if cond and (not seen["conditions"] or seen["conditions"][-1][1:3] != (cond["status"], cond["reason"])):
                    seen["conditions"].append((now, cond["status"], cond["reason"], cond["message"]))
                for p in worker_pods(cluster, namespace, BATCH):
                    info = seen["pods"].setdefault(p["metadata"]["name"], {"created": now})
                    phase = p.get("status", {}).get("phase")
                    if info.get("phases", [(None,)])[-1][0] != phase:
                        info.setdefault("phases", []).append((phase, now))
                    if running(p) and "running" not in info:
                        info["running"] = now
                    if p["metadata"].get("deletionTimestamp") and "deleting" not in info:
                        info["deleting"] = now
                if freezer.frozen is not None and "died" not in seen and not freezer.frozen.alive():
                    seen["died"] = now

            def ended() -> dict | None:
                st = (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}
                watch(st)
                return st if st.get("phase") in ("Succeeded", "Failed", "Cancelled") else None

            freezer.start()
            t0 = time.monotonic()
            ocr.apply({"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch",
                       "metadata": {"name": BATCH}, "spec": spec()})
            final = wait_for(ended, timeout=900, interval=0.25, message=f"OcrBatch {BATCH} ended")
            took = time.monotonic() - t0
            freezer.stop.set()
            frozen = freezer.frozen
            assert frozen is not None and freezer.pod is not None, "the batch ended before the worker could be frozen"
            seen["frozen_pod"] = freezer.pod["metadata"]["name"]
            print(f"froze PID {frozen.pid} of pod {seen['frozen_pod']} after {freezer.results_at_freeze} results")
            if "died" not in seen:  # the kubelet kills it when its pod's grace period ends
                wait_for(lambda: not frozen.alive(), timeout=60, interval=0.25, message="the frozen process killed")
                seen["died"] = time.monotonic()
            events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "--field-selector",
                                                "reason=Stalled", "-o", "json").stdout)["items"]
            pod_info = seen["pods"]
            victim = pod_info[seen["frozen_pod"]]
            after = [i for n, i in pod_info.items() if n != seen["frozen_pod"]]
            timeline = {
                "detected_s": victim.get("deleting", float("nan")) - frozen.at,
                "died_s": seen["died"] - frozen.at,
                "new_pod_running_s": min((i["running"] for i in after if "running" in i), default=float("nan"))
                - frozen.at,
                "killed": not frozen.alive(),
            }
            print(f"\nstalled: {final.get('phase')} in {took:.1f}s (the index did no work from the freeze until "
                  f"its new pod ran: {timeline['new_pod_running_s']:.1f}s); pod deleted {timeline['detected_s']:.1f}s after the freeze "
                  f"(stallSeconds {STALL_SECONDS}, reads every {READ_SECONDS}s), the frozen process gone "
                  f"{timeline['died_s']:.1f}s after it, the index's new pod running "
                  f"{timeline['new_pod_running_s']:.1f}s after it (both on the shard, one frozen, for "
                  f"{max(0.0, timeline['died_s'] - timeline['new_pod_running_s']):.1f}s); Stalled condition: "
                  f"{[c[1:3] for c in seen['conditions']]}")
            for name, info in pod_info.items():
                print(f"  pod {name}: " + ", ".join(f"{ph} at {t - frozen.at:+.1f}s" for ph, t in info.get("phases", []))
                      + (f", deleting at {info['deleting'] - frozen.at:+.1f}s" if "deleting" in info else ""))
            yield {"status": final, "out": data / "out", "events": events, "seen": seen,
                   "timeline": timeline, "took": took}
    except Exception:
        print_operator_log(op)
        raise
    finally:
        freezer.stop.set()
        if freezer.frozen is not None:
            freezer.frozen.release()
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_frozen_worker_is_found_and_its_pod_deleted_within_stall_seconds_and_a_read(ran):
    # the clock started at its last progress, at most one progress interval before the freeze
    assert ran["timeline"]["detected_s"] <= STALL_SECONDS + 2 * READ_SECONDS + 1, ran["timeline"]
    assert ran["timeline"]["new_pod_running_s"] > ran["timeline"]["detected_s"], ran["timeline"]


def test_a_warning_event_and_the_stalled_condition_name_the_index_and_the_pod(ran):
    pod = ran["seen"]["frozen_pod"]
    assert [e["type"] for e in ran["events"]] == ["Warning"], ran["events"]
    assert "index 0" in ran["events"][0]["message"] and pod in ran["events"][0]["message"], ran["events"]
    states = [c[1:3] for c in ran["seen"]["conditions"]]
    assert states[0] == ("True", "Stalled") and pod in ran["seen"]["conditions"][0][3], ran["seen"]["conditions"]
    assert ("False", "Recovered") in states, states  # the new pod moved


def test_the_batch_succeeds_with_every_pages_result_exactly_once(ran):
    st = ran["status"]
    assert st["phase"] == "Succeeded", st
    assert st["documents"] == {"total": DOCUMENTS, "done": DOCUMENTS, "failed": 0}, st
    found = results(ran["out"])
    assert found == {f"p{i:03d}.png": [1] for i in range(DOCUMENTS)}
    assert not list((ran["out"] / "errors").glob("*")), "no document failed"


def test_the_frozen_process_was_killed_with_its_pod(ran):
    assert ran["timeline"]["killed"]
