"""An OcrBatch on the REAL node: the operator runs the Indexed Job of workers against an OcrService of
2 pods, follows it to Succeeded and delivers the signed callback.

Node: the server pods (which serve HTTPS and require an API key: spec.tls, spec.auth) and the worker
pods run on `real-node-0` (the workers take the OcrService's node selector and toleration); the
operator runs as a local process with the operator image as the workers' image
(OCR_OPERATOR_BATCH_IMAGE, imported, never pulled) and progress read every 2 s. Input and output are
two folders of one hostPath PersistentVolume (PVC `batch-data`, /in and /out). What was sent is
counted by the servers' own /metrics (batch-class 200s on /v1/ocr, read from each pod), not by the
worker. The callback receiver is a local HTTP server (the operator sends the callback) that answers
500 first, then 200.

One module fixture runs the batch of 30 documents once (PDFs, PNG, JPEG, WebP, TIFF, and five bad
ones: corrupt, empty, zero bytes, unsupported, over maxDocumentBytes); each test reads one outcome
of it. Then a second batch of 120 pages, read from and written to the harness's S3 server
(versitygw, reached by the pods at the node's IP, credentials from a Secret), is cancelled mid-way:
the workers are gone within 30 s, the phase is Cancelled, the results written so far are kept (read
back over S3) and the batch.cancelled callback is delivered. A third batch of 100 pages loses a
worker pod and a server pod mid-way while the OcrService is upgraded to a revision whose pod exits
at start-up; the operator rolls it back while the batch runs, and the batch still ends Succeeded
with every document's result once, the restarted index skipping what its first pod finished. A
fourth batch of 60 pages is suspended mid-way (spec.suspend): its workers stop within 30 s releasing
the documents they held, nothing more is written while it is Suspended, and resumed it ends
Succeeded with each page once, its new workers skipping the finished documents, no index's retry
spent. The preflight is covered on the kwok cluster (tests/e2e/test_operator_batch.py).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest

from localcluster.nodeconfig import NODE_IP
from localcluster.s3server import LOOPBACK, S3Server
from localcluster.waiting import wait_for
from ocr_operator.ocrbatch import callback, render
from tests.e2e.batch_support import batch_operator, pod_batch_requests, s3_client
from tests.e2e.callback_receiver import Receiver
from tests.e2e.operator_fixtures import OcrHelpers, print_operator_log
from tests.e2e.realnode_fixtures import hostpath_claim, real_ocrservice, server_pods, tiny_model_claim, tls_secret
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME, BATCH = "reader", "archive"
HMAC_KEY = b"batch-test-hmac-key-of-32-bytes-0001"  # at least 32 bytes, or the batch is held
BUCKET = "archive"
API_KEYS = ("batch-key-0001", "person-key-0002")  # the OcrService's spec.auth Secret: the workers send the first
GOOD_PAGES = {"scans/report.pdf": 4, "photo.png": 1, "photo.jpg": 1, "scan.webp": 1, "fax.tiff": 2,
              **{f"letters/l{i}.pdf": 2 for i in range(4)}, **{f"pages/p{i:02d}.png": 1 for i in range(16)}}
CANCEL_PAGES = 120
FAULT_PAGES = 100
SUSPEND_PAGES = 60
MAX_DOCUMENT_BYTES = 1024 * 1024
BAD = {"corrupt.pdf": "the PDF could not be opened", "empty.pdf": "the PDF could not be opened",
       "zero.pdf": "the file is empty", "notes.docx": "unsupported type", "huge.png": f"the limit is {MAX_DOCUMENT_BYTES}"}



def write_documents(folder: Path) -> None:
    """30 documents, 33 good pages: PDFs of 2 and 4 pages, PNG, JPEG, WebP, a 2-page TIFF, and 5 bad ones."""
    for sub in ("scans", "pages", "letters"):
        (folder / sub).mkdir(parents=True)
    (folder / "scans" / "report.pdf").write_bytes(samples.pdf_of_sizes([(200 + 10 * i, 150) for i in range(4)]))
    (folder / "photo.png").write_bytes(samples.png(300, 200, seed=3))
    (folder / "photo.jpg").write_bytes(samples.encode(samples.page(280, 210, seed=5), "JPEG", quality=85))
    (folder / "scan.webp").write_bytes(samples.encode(samples.page(260, 190, seed=6), "WEBP"))
    (folder / "fax.tiff").write_bytes(samples.multipage_tiff(2))
    for i in range(4):
        (folder / "letters" / f"l{i}.pdf").write_bytes(samples.pdf_of_sizes([(180 + 6 * i, 140), (150, 190)]))
    for i in range(16):
        (folder / "pages" / f"p{i:02d}.png").write_bytes(samples.png(160 + 8 * i, 120, seed=10 + i))
    (folder / "corrupt.pdf").write_bytes(b"%PDF-1.7\nthis is not a PDF body\n")
    (folder / "empty.pdf").write_bytes(samples._pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>",
                                                      b"<< /Type /Pages /Kids [] /Count 0 >>"]))
    (folder / "zero.pdf").write_bytes(b"")
    (folder / "notes.docx").write_bytes(b"PK\x03\x04 not a document the model reads")
    (folder / "huge.png").write_bytes(samples.png(64, 64, seed=2) + b"\0" * MAX_DOCUMENT_BYTES)  # over the limit


def batch_requests(pods: list[dict]) -> float:
    """Batch-class /v1/ocr requests answered 200, summed over the server pods' own /metrics (HTTPS)."""
    return sum(pod_batch_requests(pod, https=True) for pod in pods)



def location(claim: str, where: str) -> dict:
    """A PVC path, or an S3 URL read and written with the credentials of Secret `s3`."""
    if where.startswith("s3://"):
        return {"s3": {"url": where, "credentialsSecret": "s3"}}
    return {"pvc": {"claimName": claim, "path": where}}


def ocrbatch(name: str, claim: str, receiver_url: str | None = None, paths: tuple[str, str] = ("/in", "/out")) -> dict:
    spec = {"service": NAME, "input": location(claim, paths[0]), "output": location(claim, paths[1]),
            "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 2, "concurrencyPerWorker": 4,
            "limits": {"maxDocumentBytes": MAX_DOCUMENT_BYTES}}
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
    (data / "faults").mkdir()  # the batch whose worker pod and server pod are deleted mid-way
    for i in range(FAULT_PAGES):
        (data / "faults" / f"f{i:03d}.png").write_bytes(samples.png(180 + i, 140, seed=400 + i))
    (data / "out-faults").mkdir()
    (data / "paused").mkdir()  # the batch suspended mid-way and resumed
    for i in range(SUSPEND_PAGES):
        (data / "paused" / f"s{i:03d}.png").write_bytes(samples.png(170 + i, 130, seed=700 + i))
    (data / "out-paused").mkdir()
    for path in [data, *data.rglob("*")]:  # the workers run as uid 65532; hostPath keeps the modes
        path.chmod(0o755 if path.is_dir() else 0o644)
    for out in ("out", "out-faults", "out-paused"):
        (data / out).chmod(0o777)
    # The callback receiver is on this machine's loopback, which the egress guard refuses unless allowed.
    op = batch_operator(cluster, namespace, workdir / "operator.log", product_images, 2,
                        OCR_OPERATOR_CALLBACK_ALLOW_CIDRS="127.0.0.1/32")
    receiver = Receiver()
    ocr = OcrHelpers(cluster, namespace)
    s3 = S3Server(hosts=(LOOPBACK, NODE_IP))
    try:
        s3.start()
        bucket = s3_client(s3)
        bucket.create_bucket(Bucket=BUCKET)
        for i in range(CANCEL_PAGES):  # the batch cancelled mid-way reads S3 and writes its results there
            bucket.put_object(Bucket=BUCKET, Key=f"many/p{i:03d}.png", Body=samples.png(200 + i, 150, seed=100 + i))
        cluster.kubectl("create", "secret", "generic", "s3", "-n", namespace,
                        f"--from-literal=AWS_ACCESS_KEY_ID={s3.access_key}",
                        f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret_key}",
                        f"--from-literal=AWS_ENDPOINT_URL={s3.endpoint_for(NODE_IP)}",
                        f"--from-literal=AWS_REGION={s3.region}")
        cluster.wait_default_serviceaccount(namespace)
        image = product_images.on_node("server")
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            hostpath_claim(cluster, namespace, data, "batch-data", "ReadWriteOnce", f"batch-data-{namespace}")
            t0 = time.monotonic()
            cluster.kubectl("create", "secret", "generic", "reader-keys", "-n", namespace,
                            "--from-literal=api-keys=# batch first\n" + ", ".join(API_KEYS))
            tls_secret(cluster, namespace, "reader-tls", f"{NAME}.{namespace}.svc", workdir)
            ocr.apply(real_ocrservice(NAME, image, replicas=2, auth={"secretName": "reader-keys"},
                                      tls={"secretName": "reader-tls"},
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
                   "data": data, "cluster": cluster, "namespace": namespace, "s3": bucket}
    except Exception:
        print_operator_log(op)
        raise
    finally:
        receiver.close()
        op.stop()
        s3.stop()
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
    for document, reason in BAD.items():
        assert reason in by_document[document]["error"], by_document[document]


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
    # The OcrService requires API keys and serves HTTPS: the workers read the keys from its Secret and
    # trust its self-signed certificate, checked against the Service's name (every page above was a 200).
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert {"name": "api-keys", "secret": {"secretName": "reader-keys", "defaultMode": 0o440,
                                           "items": [{"key": "api-keys", "path": "api-keys"}]}} in volumes
    assert {"name": "service-ca", "secret": {"secretName": "reader-tls", "defaultMode": 0o444,
                                             "items": [{"key": "tls.crt", "path": "ca.crt"}]}} in volumes
    worker_config = json.loads(ran["ocr"].get("configmap", render.configmap_name(BATCH))["data"][render.CONFIG_KEY])
    assert worker_config["serviceUrl"].startswith("https://")
    assert worker_config["serverName"] == f"{NAME}.{ran['namespace']}.svc"


def test_the_callback_arrives_signed_once_delivered_after_a_500(ran):
    requests = ran["receiver"].requests
    assert len(requests) == 2, [h for h, _ in requests]
    (h1, b1), (h2, b2) = requests
    assert b1 == b2 and h1["Idempotency-Key"] == h2["Idempotency-Key"]
    # (a tolerance of an hour: the module's other tests may run between the delivery and this check)
    assert callback.verify(HMAC_KEY, h2[callback.SIGNATURE_HEADER], b2, tolerance=3600)
    assert not callback.verify(b"another key", h2[callback.SIGNATURE_HEADER], b2, tolerance=3600)
    doc = json.loads(b2)
    assert (doc["type"], doc["phase"], doc["batch"]["name"]) == ("batch.completed", "Succeeded", BATCH)
    assert doc["pages"]["done"] == sum(GOOD_PAGES.values())
    cb = ran["callback"]
    assert (cb["state"], cb["attempts"], cb["event"], cb["lastStatus"]) == ("Delivered", 2, "batch.completed", 200)



def test_a_cancel_mid_batch_stops_the_workers_within_30s_and_keeps_the_results_written(ran):
    ocr = ran["ocr"]
    cancelled = ocrbatch("cancelled", "batch-data", ran["receiver"].url,
                         paths=(f"s3://{BUCKET}/many/", f"s3://{BUCKET}/out-cancelled/"))
    cancelled["spec"]["concurrencyPerWorker"] = 1  # a page at a time per worker: cancelled well before its end
    ocr.apply(cancelled)

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
    listed = ran["s3"].list_objects_v2(Bucket=BUCKET, Prefix="out-cancelled/results/", MaxKeys=1000)
    kept = [o["Key"] for o in listed.get("Contents", []) if o["Key"].endswith(".jsonl")]
    print(f"\ncancelled after {st['pages']['done']} pages: workers gone {stopped:.1f}s after the patch, "
          f"{len(kept)} results kept")
    assert stopped < 30
    assert 0 < len(kept) < CANCEL_PAGES
    assert all(len(ran["s3"].get_object(Bucket=BUCKET, Key=k)["Body"].read().splitlines()) == 1
               for k in kept)  # each a whole page's result, read back over S3
    assert next(c for c in st["conditions"] if c["type"] == "Cancelled")["status"] == "True"
    cb = wait_for(lambda: ((ocr.get("ocrbatch", "cancelled") or {}).get("status") or {}).get("callback"),
                  timeout=60, interval=0.5, message="the cancel's callback")
    assert (cb["event"], cb["state"]) == ("batch.cancelled", "Delivered"), cb


def test_a_worker_pod_and_a_server_pod_deleted_and_a_rollback_mid_batch_lose_no_page_and_redo_no_finished_document(ran):
    """Three faults at once, 10 pages in: a worker pod and a server pod deleted, and a broken upgrade
    of the OcrService (its new pod exits at start-up) that the operator rolls back while the batch runs."""
    ocr, cluster, namespace = ran["ocr"], ran["cluster"], ran["namespace"]
    good_revision = (ocr.get("ocrs", NAME) or {})["status"]["currentRevision"]
    ocr.apply(ocrbatch("faults", "batch-data", paths=("/faults", "/out-faults")))

    def batch_status() -> dict:
        return (ocr.get("ocrbatch", "faults") or {}).get("status") or {}

    at = wait_for(lambda: (n := (batch_status().get("pages") or {}).get("done", 0)) >= 10 and n,
                  timeout=180, interval=0.5, message="10 pages done")
    [worker] = [p for p in ocr.list("pods", "ocr.causalflow.dev/batch=faults")
                if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"]
    server = server_pods(cluster, namespace, NAME)[0]["metadata"]["name"]
    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", worker["metadata"]["name"], "-n", namespace, "--wait=false")
    cluster.kubectl("delete", "pod", server, "-n", namespace, "--wait=false")
    ocr.patch("ocrs", NAME, {"spec": {"env": [{"name": "WARMUP", "value": "maybe"}]}})  # refused at start-up
    seen: dict[str, float] = {}

    def ended() -> dict | None:
        rollout = ((ocr.get("ocrs", NAME) or {}).get("status") or {})
        if "rolled_back" not in seen and (rollout.get("rollout") or {}).get("phase") == "RolledBack" \
                and rollout.get("failedRevision") and rollout.get("currentRevision") == good_revision:
            seen["rolled_back"] = time.monotonic() - t0
        st = batch_status()
        return st if st.get("phase") in ("Succeeded", "Failed") else None

    st = wait_for(ended, timeout=300, interval=0.5, message="the batch ended")
    took = time.monotonic() - t0
    print(f"\nworker pod {worker['metadata']['name']} and server pod {server} deleted and a broken upgrade "
          f"applied at {at} pages: rolled back {seen.get('rolled_back', float('nan')):.1f}s later, the batch ended "
          f"{st['phase']} {took:.1f}s later ({st.get('pageSummary')})")
    out = ran["data"] / "out-faults"
    results = sorted(p.name.split(".")[0] for p in (out / "results").glob("*.jsonl"))
    errors = [line for f in (out / "errors").glob("*.jsonl") for line in f.read_text().splitlines()] \
        if (out / "errors").exists() else []
    # Each pod of an index writes its own progress object (progress/index-<n>.<pod>.json).
    others = [p for p in (out / "progress").glob("index-00000.*.json")
              if p.name != f"index-00000.{worker['metadata']['name']}.json"]
    assert len(others) == 1, sorted(p.name for p in (out / "progress").iterdir())
    restarted = json.loads(others[0].read_text())
    assert st["phase"] == "Succeeded", st
    assert "rolled_back" in seen, "the broken upgrade was not rolled back before the batch ended"
    assert results == [f"f{i:03d}" for i in range(FAULT_PAGES)] and errors == []
    assert all(len(p.read_text().splitlines()) == 1 for p in (out / "results").glob("*.jsonl"))
    # Index 0 ran again in a new pod, which skipped every document its first pod had finished.
    assert restarted["documents_skipped"] > 0 and restarted["documents_done"] == restarted["documents_total"], restarted


def test_a_batch_suspended_mid_way_stops_keeps_its_results_and_resumed_finishes_each_page_once(ran):
    ocr, out = ran["ocr"], ran["data"] / "out-paused"
    paused = ocrbatch("paused", "batch-data", paths=("/paused", "/out-paused"))
    paused["spec"]["concurrencyPerWorker"] = 1  # a page at a time per worker: suspended well before its end
    ocr.apply(paused)

    def status() -> dict:
        return (ocr.get("ocrbatch", "paused") or {}).get("status") or {}

    def results() -> list[str]:
        return sorted(p.name.split(".")[0] for p in (out / "results").glob("*.jsonl")) if (out / "results").exists() \
            else []

    wait_for(lambda: (status().get("pages") or {}).get("done", 0) >= 4, timeout=180, interval=0.5,
             message="4 pages done")
    first_pods = {p["metadata"]["name"] for p in ocr.list("pods", "ocr.causalflow.dev/batch=paused")}
    t0 = time.monotonic()
    ocr.patch("ocrbatch", "paused", {"spec": {"suspend": True}})
    wait_for(lambda: status().get("phase") == "Suspended", timeout=30, interval=0.5, message="phase Suspended")
    wait_for(lambda: ocr.list("pods", "ocr.causalflow.dev/batch=paused") == [], timeout=30, interval=0.5,
             message="the workers gone")
    stopped = time.monotonic() - t0
    kept = results()
    time.sleep(3)
    assert results() == kept  # nothing runs while suspended
    markers = [json.loads(p.read_text()) for p in (out / "attempts").glob("*.json")]
    held = [m for m in markers if f"{m['document'].split('.')[0]}" not in kept]
    cond = next(c for c in status()["conditions"] if c["type"] == "Ready")
    print(f"\nsuspended at {len(kept)} of {SUSPEND_PAGES} results: workers gone {stopped:.1f}s after the patch; "
          f"{len(held)} documents held then; Ready: {cond['reason']}: {cond['message']}")
    assert stopped < 30 and 0 < len(kept) < SUSPEND_PAGES
    assert (cond["status"], cond["reason"]) == ("False", "Suspended")
    assert all(m["released"] for m in held), held  # stopped, not killed: no attempt counted against them
    job = ocr.get("job", "paused")
    assert job["spec"]["suspend"] is True and not job["status"].get("failed"), job["status"]

    t1 = time.monotonic()
    ocr.patch("ocrbatch", "paused", {"spec": {"suspend": False}})
    st = wait_for(lambda: (s := status()).get("phase") in ("Succeeded", "Failed") and s, timeout=300, interval=0.5,
                  message="the resumed batch ended")
    print(f"resumed: {st['phase']} {time.monotonic() - t1:.1f}s later ({st.get('pageSummary')})")
    assert st["phase"] == "Succeeded", st
    assert results() == [f"s{i:03d}" for i in range(SUSPEND_PAGES)]
    assert all(len(p.read_text().splitlines()) == 1 for p in (out / "results").glob("*.jsonl"))
    assert not (out / "errors").exists() or not any((out / "errors").iterdir())
    job = ocr.get("job", "paused")
    assert not job["status"].get("failed") and not job["status"].get("failedIndexes"), job["status"]
    # The workers that ran after the resume (new pods) skipped what the first ones had finished.
    after = [json.loads(p.read_text()) for p in (out / "progress").glob("index-*.json")
             if p.name.split(".", 1)[1].removesuffix(".json") not in first_pods]
    assert after and sum(r["documents_skipped"] for r in after) == len(kept), after
    reasons = [e["reason"] for e in ocr.list("events") if e["involvedObject"].get("name") == "paused"
               and e["involvedObject"].get("kind") == "OcrBatch"]
    assert {"Suspended", "Resumed"} <= set(reasons), reasons
