"""Faults mid-batch on the REAL node: an OcrBatch read from and written to the harness's S3 server
(versitygw, reached by the pods at the node's IP) loses its operator, then its storage, and still
ends Succeeded with every good page's result exactly once and each bad document in the errors files
with its reason. Each test measures what the fault cost: the batch's duration minus that of the
same batch run without a fault (the baseline), and the window in which it was stalled.

- **Operator restart:** the operator (a local process) is killed with SIGKILL once the batch is
  under way, stays down a few seconds and is started again. The Job it created is the same Job
  afterwards (same uid, created once), and the status counts come out right.
- **S3 outage:** versitygw is stopped for 30 s once the batch is under way, then started again on
  the same port with the same data. The workers wait it out inside spec.limits.storageRetrySeconds:
  no worker pod fails, the Job needs no retry.

One module fixture: one OcrService pod (the tiny model on the CPU), the operator with the operator
image as the workers' image (as tests/e2e/test_realnode_batch.py runs it), and three corpora of the
same shape in one bucket (other pages each, so the server's result cache answers none of them):
the baseline's, the restart's and the outage's. What was sent is counted by the server pod's own
/metrics (batch-class 200s on /v1/ocr), polled while a batch runs: that is how the stall is seen.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections import Counter

import httpx
import pytest

from localcluster.nodeconfig import NODE_IP
from localcluster.operator_process import OperatorProcess
from localcluster.s3server import LOOPBACK, S3Server
from localcluster.waiting import wait_for
from ocr_operator.ocrbatch import render
from tests.e2e.batch_support import batch_operator, pod_batch_requests, s3_client, wait_server_pod_ready, worker_pods
from tests.e2e.operator_fixtures import OcrHelpers, print_operator_log
from tests.e2e.realnode_fixtures import real_ocrservice, server_pods, tiny_model_claim
from tests.server import samples
from tests.unit.batch.test_patience import restart_same_port

pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold node imports the images first

NAME, BUCKET = "faulted", "archive"
PAGES = 40  # one-page PNGs per corpus: most of them after UNDER_WAY, when the fault comes
BAD = {"corrupt.pdf": "the PDF could not be opened", "notes.docx": "unsupported type"}
UNDER_WAY = 8  # pages done (in status) before the fault
OPERATOR_DOWN_SECONDS = 5.0
OUTAGE_SECONDS = 30.0
STORAGE_RETRY_SECONDS = 180  # spec.limits.storageRetrySeconds: the 30 s outage and the backoff after it fit
BATCH_TIMEOUT = 420.0
SEEDS = {"baseline": 1000, "restart": 2000, "outage": 3000}


def put_corpus(bucket, prefix: str, seed: int) -> None:
    for i in range(PAGES):
        bucket.put_object(Bucket=BUCKET, Key=f"{prefix}/p{i:03d}.png", Body=samples.png(200 + i, 150, seed=seed + i))
    bucket.put_object(Bucket=BUCKET, Key=f"{prefix}/corrupt.pdf", Body=b"%PDF-1.7\nthis is not a PDF body\n")
    bucket.put_object(Bucket=BUCKET, Key=f"{prefix}/notes.docx", Body=b"PK\x03\x04 not a document the model reads")


def ocrbatch(name: str) -> dict:
    spec = {"service": NAME,
            "input": {"s3": {"url": f"s3://{BUCKET}/{name}/", "credentialsSecret": "s3"}},
            "output": {"s3": {"url": f"s3://{BUCKET}/out-{name}/", "credentialsSecret": "s3"}},
            "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 2, "concurrencyPerWorker": 2,
            "limits": {"storageRetrySeconds": STORAGE_RETRY_SECONDS}}
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": name}, "spec": spec}


def batch_requests(pod: dict) -> float | None:
    """Batch-class /v1/ocr requests answered 200 by the server pod (its own /metrics); None unread."""
    try:
        return pod_batch_requests(pod, timeout=5)
    except httpx.HTTPError:
        return None


class Bed:
    """The module's cluster objects and the means to run one batch and watch it."""

    def __init__(self, cluster, namespace: str, ocr: OcrHelpers, op: OperatorProcess, s3: S3Server) -> None:
        self.cluster, self.namespace, self.ocr, self.op, self.s3 = cluster, namespace, ocr, op, s3
        self.bucket = s3_client(s3)
        [self.server] = server_pods(cluster, namespace, NAME)

    def status(self, name: str) -> dict:
        return (self.ocr.get("ocrbatch", name) or {}).get("status") or {}

    def run(self, name: str, fault=None) -> dict:
        """Create the batch, call `fault(run)` once UNDER_WAY pages are done (in a thread: the watch
        goes on), and follow it to its end, polling its status and the server's count every 0.5 s.
        Returns the run: status, seconds, pages sent, the timeline [(s, pages done, sent)]."""
        start_count = batch_requests(self.server) or 0.0
        run: dict = {"name": name, "timeline": [], "marks": {}}
        t0 = run["t0"] = time.monotonic()
        self.ocr.apply(ocrbatch(name))
        faulting: threading.Thread | None = None

        def ended() -> dict | None:
            nonlocal faulting
            st = self.status(name)
            sent = batch_requests(self.server)
            done = (st.get("pages") or {}).get("done", 0)
            run["timeline"].append((time.monotonic() - t0, done, None if sent is None else sent - start_count))
            if fault is not None and faulting is None and done >= UNDER_WAY:
                run["marks"]["fault"] = time.monotonic() - t0
                faulting = threading.Thread(target=fault, args=(run,), daemon=True)
                faulting.start()
            return st if st.get("phase") in ("Succeeded", "Failed", "Cancelled") else None

        try:
            run["status"] = wait_for(ended, timeout=BATCH_TIMEOUT, interval=0.5, message=f"OcrBatch {name} ended")
            run["seconds"] = time.monotonic() - t0
        finally:
            if faulting is not None:
                faulting.join(timeout=120)
        run["sent"] = (batch_requests(self.server) or 0.0) - start_count
        run["pods"] = worker_pods(self.ocr.cluster, self.ocr.ns, name)
        run["job"] = self.ocr.get("job", render.job_name(name))
        print(f"\nOcrBatch {name}: {run['status'].get('phase')} in {run['seconds']:.1f}s, "
              f"{run['status'].get('pageSummary')} pages, {run['sent']:.0f} batch requests answered; "
              f"marks {({k: round(v, 1) for k, v in run['marks'].items()})}")
        return run

    def objects(self, prefix: str) -> list[str]:
        return [o["Key"] for page in self.bucket.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
                for o in page.get("Contents", [])]

    def read(self, key: str) -> bytes:
        return self.bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read()


@pytest.fixture(scope="module")
def bed(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    namespace = f"t-realnode-faults-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("batch-faults")
    op = batch_operator(cluster, namespace, workdir / "operator.log", product_images, 2)
    ocr = OcrHelpers(cluster, namespace)
    s3 = S3Server(hosts=(LOOPBACK, NODE_IP))
    try:
        s3.start()
        bucket = s3_client(s3)
        bucket.create_bucket(Bucket=BUCKET)
        for prefix, seed in SEEDS.items():
            put_corpus(bucket, prefix, seed)
        cluster.kubectl("create", "secret", "generic", "s3", "-n", namespace,
                        f"--from-literal=AWS_ACCESS_KEY_ID={s3.access_key}",
                        f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret_key}",
                        f"--from-literal=AWS_ENDPOINT_URL={s3.endpoint_for(NODE_IP)}",
                        f"--from-literal=AWS_REGION={s3.region}")
        cluster.wait_default_serviceaccount(namespace)
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            ocr.apply(real_ocrservice(NAME, product_images.on_node("server"),
                                      model={"pvc": {"claimName": model, "subPath": "weights"}}))
            wait_server_pod_ready(cluster, namespace, NAME)
            yield Bed(cluster, namespace, ocr, op, s3)
    except Exception:
        print_operator_log(op)
        raise
    finally:
        op.stop()
        s3.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def baseline(bed) -> dict:
    """The same batch without a fault: what a fault's run is measured against."""
    run = bed.run("baseline")
    assert_outcome(bed, run)
    return run


def assert_outcome(bed: Bed, run: dict) -> None:
    """Succeeded, the counts right, each good page's result exactly once (and sent once), each bad
    document in the errors files with its reason."""
    name, st = run["name"], run["status"]
    assert st["phase"] == "Succeeded", st
    assert st["pages"] == {"total": PAGES, "done": PAGES, "failed": 0}, st
    assert st["documents"] == {"total": PAGES + len(BAD), "done": PAGES, "failed": len(BAD)}, st
    results = [k for k in bed.objects(f"out-{name}/results/") if k.endswith(".jsonl")]
    per_document = Counter(k.removeprefix(f"out-{name}/results/").rsplit(".", 2)[0] for k in results)
    # One result each, a bad document's too: its one line is its error (the mark that it is done).
    assert per_document == Counter({**{f"p{i:03d}.png": 1 for i in range(PAGES)}, **dict.fromkeys(BAD, 1)}), \
        per_document
    for key in results:
        [line] = bed.read(key).decode().splitlines()  # one page, once
        record = json.loads(line)
        assert (record.get("error") is None) == (record["document"] not in BAD), record
    errors = [json.loads(line) for k in bed.objects(f"out-{name}/errors/") if k.endswith(".jsonl")
              for line in bed.read(k).decode().splitlines()]
    by_document = {e["document"]: e for e in errors}
    assert len(errors) == len(BAD) and set(by_document) == set(BAD), errors
    for document, reason in BAD.items():
        assert reason in by_document[document]["error"], by_document[document]
    assert run["sent"] == PAGES, run["sent"]  # the server's own count: every good page sent once


def stall_window(run: dict, back: float) -> tuple[float, float]:
    """The server's count around an outage that ended `back` s into the run: since when it stood at
    the value it had then, and when it first moved past it."""
    points = [(t, sent) for t, _, sent in run["timeline"] if sent is not None]
    held = max((sent for t, sent in points if t <= back), default=0.0)
    since = next(t for t, sent in points if sent >= held)
    moved = next((t for t, sent in points if t > back and sent > held), float("nan"))
    return since, moved


def status_resumed(run: dict, after: float) -> float:
    """When status.pages.done first moved after `after` s into the run."""
    before = max((done for t, done, _ in run["timeline"] if t <= after), default=0)
    return next((t for t, done, _ in run["timeline"] if t > after and done != before), float("nan"))


def test_an_operator_killed_and_restarted_mid_batch_leaves_one_job_and_the_batch_succeeds_with_each_result_once(bed, baseline):
    job_before: dict = {}

    def kill_and_restart(run: dict) -> None:
        job_before.update(bed.ocr.get("job", render.job_name("restart")) or {})
        bed.op.kill()  # SIGKILL by its PID
        run["marks"]["killed"] = time.monotonic() - run["t0"]
        time.sleep(OPERATOR_DOWN_SECONDS)
        bed.op.start()
        run["marks"]["restarted"] = time.monotonic() - run["t0"]

    starts = bed.op.starts
    run = bed.run("restart", kill_and_restart)
    assert bed.op.starts == starts + 1 and "restarted" in run["marks"], run["marks"]
    assert_outcome(bed, run)
    assert job_before, "no Job when the operator was killed"
    assert run["job"]["metadata"]["uid"] == job_before["metadata"]["uid"]
    assert [j["metadata"]["uid"] for j in bed.ocr.list("jobs", "ocr.causalflow.dev/batch=restart")] \
        == [job_before["metadata"]["uid"]]
    created = re.findall(rf"OcrBatch {bed.namespace}/restart: Job {re.escape(render.job_name('restart'))} created",
                         bed.op.log_text())
    assert len(created) == 1, created  # the restarted operator found its Job and created none
    # The workers ran on: the Job needed no retry, every pod exited 0.
    assert not (run["job"].get("status") or {}).get("failed"), run["job"]["status"]
    exits = [cs["state"]["terminated"]["exitCode"] for p in run["pods"] for cs in p["status"]["containerStatuses"]]
    assert exits == [0, 0], exits
    cost = run["seconds"] - baseline["seconds"]
    resumed = status_resumed(run, run["marks"]["killed"])
    print(f"operator restart: killed at {run['marks']['killed']:.1f}s, up again at {run['marks']['restarted']:.1f}s; "
          f"batch {run['seconds']:.1f}s vs baseline {baseline['seconds']:.1f}s: the fault cost {cost:+.1f}s "
          f"(status.pages.done moved again at {resumed:.1f}s, {resumed - run['marks']['killed']:.1f}s after the kill)")


def test_an_s3_outage_of_30s_mid_batch_is_waited_out_and_the_batch_succeeds_with_each_result_once(bed, baseline):
    def outage(run: dict) -> None:
        run["marks"]["s3_down"] = time.monotonic() - run["t0"]
        restart_same_port(bed.s3, OUTAGE_SECONDS)  # SIGTERM by its PID, 30 s, the same port and root
        run["marks"]["s3_started"] = time.monotonic() - run["t0"]
        wait_for(bed.s3._healthy, timeout=30, interval=0.1, message="versitygw healthy again")
        run["marks"]["s3_up"] = time.monotonic() - run["t0"]

    run = bed.run("outage", outage)
    marks = run["marks"]
    assert "s3_up" in marks, marks
    logs = [bed.cluster.kubectl("logs", p["metadata"]["name"], "-n", bed.namespace).stdout for p in run["pods"]]
    assert_outcome(bed, run)
    assert any("again in" in text for text in logs), [t[-2000:] for t in logs]  # the workers met the outage
    # Waited out inside the budget: no worker pod failed, the Job retried nothing.
    assert not (run["job"].get("status") or {}).get("failed"), run["job"]["status"]
    exits = [cs["state"]["terminated"]["exitCode"] for p in run["pods"] for cs in p["status"]["containerStatuses"]]
    assert exits == [0, 0], exits
    stalled_from, moved_again = stall_window(run, marks["s3_up"])
    assert moved_again >= marks["s3_up"], (stalled_from, moved_again, marks)  # the batch was stalled by the outage
    cost = run["seconds"] - baseline["seconds"]
    print(f"S3 outage: down at {marks['s3_down']:.1f}s for {OUTAGE_SECONDS:.0f}s, healthy again at "
          f"{marks['s3_up']:.1f}s; the server's count stood still from {stalled_from:.1f}s to {moved_again:.1f}s "
          f"({moved_again - stalled_from:.1f}s, {moved_again - marks['s3_up']:.1f}s after S3 was back); batch "
          f"{run['seconds']:.1f}s vs baseline {baseline['seconds']:.1f}s: the fault cost {cost:+.1f}s")
