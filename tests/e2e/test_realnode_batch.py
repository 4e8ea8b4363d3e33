"""An OcrBatch on the REAL node: the operator runs the Indexed Job of workers against an OcrService of
2 pods, follows it to Succeeded and delivers the signed callback.

Node: the server pods and the worker pods run on `real-node-0` (the workers take the OcrService's
node selector and toleration); the operator runs as a local process with the operator image as the
workers' image (OCR_OPERATOR_BATCH_IMAGE, imported, never pulled) and progress read every 2 s.
Input and output are two folders of one hostPath PersistentVolume (PVC `batch-data`, /in and
/out). What was sent is counted by the servers' own /metrics (batch-class 200s on /v1/ocr, read
from each pod), not by the worker. The callback receiver is a local HTTP server (the operator
sends the callback) that answers 500 first, then 200.

One module fixture runs the batch once; each test reads one outcome of it. Then a second batch of
120 pages is cancelled mid-way: the workers are gone within 30 s, the phase is Cancelled, the
results written so far are kept and the batch.cancelled callback is delivered. A third batch of 80
pages loses a worker pod and a server pod mid-way and still ends Succeeded with every document's
result once, the restarted index skipping what its first pod finished. The preflight is covered on
the kwok cluster (tests/e2e/test_operator_batch.py).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import httpx
import pytest

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from ocr_operator.batch import callback
from tests.e2e.callback_receiver import Receiver
from tests.e2e.operator_fixtures import OcrHelpers, operator_kubeconfig
from tests.e2e.realnode_fixtures import hostpath_claim, real_ocrservice, server_pods, tiny_model_claim
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME, BATCH = "reader", "archive"
HMAC_KEY = b"batch-test-hmac-key-0001"
GOOD_PAGES = {"scans/report.pdf": 4, "photo.png": 1, "fax.tiff": 2, **{f"pages/p{i}.png": 1 for i in range(5)}}
CANCEL_PAGES = 120
FAULT_PAGES = 80
BAD = {"corrupt.pdf": "PDF", "empty.pdf": "no pages", "zero.pdf": "empty", "notes.docx": "unsupported"}



def write_documents(folder: Path) -> None:
    (folder / "scans").mkdir(parents=True)
    (folder / "pages").mkdir()
    (folder / "scans" / "report.pdf").write_bytes(samples.pdf_of_sizes([(200 + 10 * i, 150) for i in range(4)]))
    (folder / "photo.png").write_bytes(samples.png(300, 200, seed=3))
    (folder / "fax.tiff").write_bytes(samples.multipage_tiff(2))
    for i in range(5):
        (folder / "pages" / f"p{i}.png").write_bytes(samples.png(160 + 8 * i, 120, seed=10 + i))
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not a PDF body\n")
    (folder / "empty.pdf").write_bytes(samples._pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>",
                                                      b"<< /Type /Pages /Kids [] /Count 0 >>"]))
    (folder / "zero.pdf").write_bytes(b"")
    (folder / "notes.docx").write_bytes(b"PK\x03\x04 not a document the model reads")


def batch_requests(pods: list[dict]) -> float:
    """Batch-class /v1/ocr requests answered 200, summed over the server pods' own /metrics."""
    total = 0.0
    for pod in pods:
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        text = httpx.get(f"http://{pod['status']['podIP']}:{port}/metrics", timeout=10, trust_env=False).text
        for line in text.splitlines():
            m = re.match(r'ocr_requests_total\{(.*)\} (\S+)$', line)
            if m:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
                if (labels.get("class"), labels.get("endpoint"), labels.get("status")) == ("batch", "/v1/ocr", "200"):
                    total += float(m.group(2))
    return total



def ocrbatch(name: str, claim: str, receiver_url: str | None = None, paths: tuple[str, str] = ("/in", "/out")) -> dict:
    spec = {"service": NAME, "input": {"pvc": {"claimName": claim, "path": paths[0]}},
            "output": {"pvc": {"claimName": claim, "path": paths[1]}},
            "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 2, "concurrencyPerWorker": 4,
            "limits": {"maxDocumentBytes": 1024 * 1024}}
    if receiver_url:
        spec["callback"] = {"url": receiver_url, "secretRef": {"name": "hook"}}
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": name}, "spec": spec}


@pytest.fixture(scope="module")
def ran(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    namespace = f"t-realnode-batch-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("batch")
    data = Path(cluster.workdir) / f"batch-data-{namespace}"
    write_documents(data / "in")
    (data / "out").mkdir()
    (data / "many").mkdir()  # the batch cancelled mid-way
    for i in range(CANCEL_PAGES):
        (data / "many" / f"p{i:03d}.png").write_bytes(samples.png(200 + i, 150, seed=100 + i))
    (data / "out-cancelled").mkdir()
    (data / "faults").mkdir()  # the batch whose worker pod and server pod are deleted mid-way
    for i in range(FAULT_PAGES):
        (data / "faults" / f"f{i:03d}.png").write_bytes(samples.png(180 + i, 140, seed=400 + i))
    (data / "out-faults").mkdir()
    for path in [data, *data.rglob("*")]:  # the workers run as uid 65532; hostPath keeps the modes
        path.chmod(0o755 if path.is_dir() else 0o644)
    (data / "out").chmod(0o777)
    (data / "out-cancelled").chmod(0o777)
    (data / "out-faults").chmod(0o777)
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], workdir / "operator.log", extra_env={
        "OCR_OPERATOR_BATCH_IMAGE": product_images.on_node("operator"),
        "OCR_OPERATOR_BATCH_IMAGE_PULL_POLICY": "Never", "OCR_OPERATOR_BATCH_PROGRESS_SECONDS": "2"})
    receiver = Receiver()
    ocr = OcrHelpers(cluster, namespace)
    try:
        wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                         check=False).returncode == 0, timeout=30, message="default ServiceAccount")
        image = product_images.on_node("server")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            hostpath_claim(cluster, namespace, data, "batch-data", "ReadWriteOnce", f"batch-data-{namespace}")
            t0 = time.monotonic()
            ocr.apply(real_ocrservice(NAME, image, replicas=2,
                                      model={"pvc": {"claimName": model, "subPath": "weights"}}))
            wait_for(lambda: len([p for p in server_pods(cluster, namespace, NAME)
                                  if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in p["status"].get("conditions", []))]) == 2,
                     timeout=300, interval=1, message="2 server pods Ready")
            print(f"\nOcrService {NAME}: 2 pods Ready in {time.monotonic() - t0:.1f}s")
            cluster.kubectl("create", "secret", "generic", "hook", "-n", namespace,
                            f"--from-literal=secret={HMAC_KEY.decode()}")
            pods = server_pods(cluster, namespace, NAME)
            before = batch_requests(pods)
            t0 = time.monotonic()
            ocr.apply(ocrbatch(BATCH, "batch-data", receiver.url))
            seen: list[dict] = []

            def ended() -> dict | None:
                st = (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}
                if not seen or seen[-1] != st:
                    seen.append(st)
                return st if st.get("phase") in ("Succeeded", "Failed", "Cancelled") else None

            final = wait_for(ended, timeout=300, interval=0.5, message=f"OcrBatch {BATCH} ended")
            took = time.monotonic() - t0
            delivered = wait_for(lambda: ((ocr.get("ocrbatch", BATCH) or {}).get("status") or {}).get("callback"),
                                 timeout=60, interval=0.5, message="status.callback written")
            after = batch_requests(server_pods(cluster, namespace, NAME))
            print(f"OcrBatch {BATCH}: {final.get('phase')} in {took:.1f}s, {final.get('pageSummary')} pages, "
                  f"{after - before:.0f} batch requests answered; callback {delivered}")
            print(cluster.kubectl("get", "ocrbatch", "-n", namespace, "-o", "wide").stdout)
            yield {"status": final, "seen": seen, "callback": delivered, "sent": after - before,
                   "out": data / "out", "receiver": receiver, "job": ocr.get("job", BATCH), "ocr": ocr,
                   "data": data, "cluster": cluster, "namespace": namespace}
    except Exception:
        print(f"\n----- operator log -----\n{op.log_tail(150)}\n----- end of operator log -----")
        raise
    finally:
        receiver.close()
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def results_of(out: Path, document: str) -> list[dict]:
    [path] = [p for p in (out / "results").rglob("*.jsonl")
              if re.fullmatch(rf"{re.escape(document)}\.[0-9a-f]{{16}}\.jsonl", p.relative_to(out / "results").as_posix())]
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_every_good_page_is_sent_once_and_has_its_result(ran):
    assert ran["sent"] == sum(GOOD_PAGES.values()), ran["sent"]
    for document, pages in GOOD_PAGES.items():
        assert len(results_of(ran["out"], document)) == pages, document


def test_the_bad_documents_are_in_the_errors_files_with_their_reasons(ran):
    errors = [json.loads(line) for f in sorted((ran["out"] / "errors").glob("index-*.jsonl"))
              for line in f.read_text().splitlines()]
    by_document = {e["document"]: e for e in errors}
    assert set(by_document) == set(BAD), errors
    assert all(e.get("error") for e in errors), errors


def test_the_batch_succeeds_with_its_counts_in_status(ran):
    st = ran["status"]
    good = sum(GOOD_PAGES.values())
    assert st["phase"] == "Succeeded", st
    assert st["pages"] == {"total": good, "done": good, "failed": 0}, st
    assert st["documents"] == {"total": len(GOOD_PAGES) + len(BAD), "done": len(GOOD_PAGES), "failed": len(BAD)}, st
    assert st["pageSummary"] == f"{good}/{good}"
    complete = next(c for c in st["conditions"] if c["type"] == "Complete")
    assert complete["status"] == "True", st["conditions"]
    job = ran["job"]
    assert job["spec"]["completionMode"] == "Indexed" and job["spec"]["completions"] == 2
    assert [o["kind"] for o in job["metadata"]["ownerReferences"]] == ["OcrBatch"]


def test_the_callback_arrives_signed_once_delivered_after_a_500(ran):
    requests = ran["receiver"].requests
    assert len(requests) == 2, [h for h, _ in requests]
    (h1, b1), (h2, b2) = requests
    assert b1 == b2 and h1["Idempotency-Key"] == h2["Idempotency-Key"]
    assert callback.verify(HMAC_KEY, h2[callback.SIGNATURE_HEADER], b2)
    assert not callback.verify(b"another key", h2[callback.SIGNATURE_HEADER], b2)
    doc = json.loads(b2)
    assert (doc["type"], doc["phase"], doc["batch"]["name"]) == ("batch.completed", "Succeeded", BATCH)
    assert doc["pages"]["done"] == sum(GOOD_PAGES.values())
    cb = ran["callback"]
    assert (cb["state"], cb["attempts"], cb["event"], cb["lastStatus"]) == ("Delivered", 2, "batch.completed", 200)



def test_a_cancel_mid_batch_stops_the_workers_within_30s_and_keeps_the_results_written(ran):
    ocr = ran["ocr"]
    ocr.apply(ocrbatch("cancelled", "batch-data", ran["receiver"].url, paths=("/many", "/out-cancelled")))

    def pages_done() -> int:
        return (((ocr.get("ocrbatch", "cancelled") or {}).get("status") or {}).get("pages") or {}).get("done", 0)

    wait_for(lambda: pages_done() >= 10, timeout=180, interval=0.5, message="10 pages done")
    t0 = time.monotonic()
    ocr.patch("ocrbatch", "cancelled", {"spec": {"cancel": True}})
    st = wait_for(lambda: (s := (ocr.get("ocrbatch", "cancelled") or {}).get("status") or {}).get("phase")
                  == "Cancelled" and s, timeout=30, interval=0.5, message="phase Cancelled")
    wait_for(lambda: ocr.list("pods", "ocr.causalflow.dev/batch=cancelled") == [], timeout=30, interval=0.5,
             message="the workers gone")
    stopped = time.monotonic() - t0
    kept = list((ran["data"] / "out-cancelled" / "results").glob("*.jsonl"))
    print(f"\ncancelled after {st['pages']['done']} pages: workers gone {stopped:.1f}s after the patch, "
          f"{len(kept)} results kept")
    assert stopped < 30
    assert 0 < len(kept) < CANCEL_PAGES
    assert all(len(p.read_text().splitlines()) == 1 for p in kept)  # each a whole page's result
    assert next(c for c in st["conditions"] if c["type"] == "Cancelled")["status"] == "True"
    cb = wait_for(lambda: ((ocr.get("ocrbatch", "cancelled") or {}).get("status") or {}).get("callback"),
                  timeout=60, interval=0.5, message="the cancel's callback")
    assert (cb["event"], cb["state"]) == ("batch.cancelled", "Delivered"), cb


def test_a_worker_pod_and_a_server_pod_deleted_mid_batch_lose_no_page_and_redo_no_finished_document(ran):
    ocr, cluster, namespace = ran["ocr"], ran["cluster"], ran["namespace"]
    ocr.apply(ocrbatch("faults", "batch-data", paths=("/faults", "/out-faults")))

    def pages_done() -> int:
        return (((ocr.get("ocrbatch", "faults") or {}).get("status") or {}).get("pages") or {}).get("done", 0)

    at = wait_for(lambda: (n := pages_done()) >= 10 and n, timeout=180, interval=0.5, message="10 pages done")
    [worker] = [p for p in ocr.list("pods", "ocr.causalflow.dev/batch=faults")
                if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"]
    server = server_pods(cluster, namespace, NAME)[0]["metadata"]["name"]
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", worker["metadata"]["name"], "-n", namespace, "--wait=false")
    cluster.kubectl("delete", "pod", server, "-n", namespace, "--wait=false")
    st = wait_for(lambda: (s := (ocr.get("ocrbatch", "faults") or {}).get("status") or {}).get("phase")
                  in ("Succeeded", "Failed") and s, timeout=300, interval=0.5, message="the batch ended")
    print(f"\nworker pod {worker['metadata']['name']} and server pod {server} deleted at {at} pages: "
          f"the batch ended {st['phase']} {time.monotonic() - t0:.1f}s later ({st.get('pageSummary')})")
    out = ran["data"] / "out-faults"
    results = sorted(p.name.split(".")[0] for p in (out / "results").glob("*.jsonl"))
    errors = [line for f in (out / "errors").glob("*.jsonl") for line in f.read_text().splitlines()] \
        if (out / "errors").exists() else []
    restarted = json.loads((out / "progress" / "index-00000.json").read_text())
    assert st["phase"] == "Succeeded", st
    assert results == [f"f{i:03d}" for i in range(FAULT_PAGES)] and errors == []
    assert all(len(p.read_text().splitlines()) == 1 for p in (out / "results").glob("*.jsonl"))
    # Index 0 ran again in a new pod, which skipped every document its first pod had finished.
    assert restarted["documents_skipped"] > 0 and restarted["documents_done"] == restarted["documents_total"], restarted
