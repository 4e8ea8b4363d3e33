"""A poison corpus on the REAL node: an OcrBatch over documents built to hurt its worker ends
Succeeded, every good page with its result exactly once and every bad document in the errors files
with its reason.

The corpus: a JSONL batch file with a good line and a line nested 1,100 deep, a TIFF whose header
declares 200 Mpx, a PNG bomb (its header declares 200 Mpx), and a TIFF whose second page (63 Mpx,
RGBA, a few KB compressed) takes more memory to decode than the worker's limit (256 Mi + 2 x
maxDocumentBytes of 1 MiB): the kernel kills the worker. Its attempt marker quarantines it as
`poison` after a death alone, and the shard goes on in the Job's next pod. The good documents (a
PNG, a 2-page PDF) are read in between. One index, concurrency 4, the operator a local process with
the operator image as the workers' (as tests/e2e/test_realnode_batch.py runs it).
"""

from __future__ import annotations

import base64
import json
import re
import time
import uuid
from pathlib import Path

import pytest
from PIL import Image

from localcluster.waiting import wait_for
from tests.e2e.batch_support import batch_operator, wait_server_pod_ready, worker_pods
from tests.e2e.operator_fixtures import OcrHelpers, print_operator_log
from tests.e2e.realnode_fixtures import hostpath_claim, real_ocrservice, tiny_model_claim
from tests.server import samples
from tests.unit.batch.corpus import deep_line, png_header_only, tiff_header_only

pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold node imports the images first

NAME, BATCH = "poisoned", "corpus"
MODEL = "deepseek-ai/DeepSeek-OCR-2"
MAX_DOCUMENT_BYTES = 1024 * 1024
GOOD_PAGES = {"photo.png": 1, "report.pdf": 2}
BAD = {"bomb.tif": "decompression bomb", "bomb.png": "decompression bomb", "oom.tif": "poison: "}


def chat_line(custom_id: str) -> str:
    url = "data:image/png;base64," + base64.b64encode(samples.png(120, 90, seed=7)).decode()
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": {
        "model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "Free OCR."}]}]}})


def memory_hog_tiff(path: Path) -> None:
    """Two pages: a small one, then 9000 x 7000 RGBA (252 MB decoded, under the 64 Mpx a page may
    have), Deflate-compressed to a few KB."""
    small = Image.new("RGBA", (64, 64), (0, 0, 0, 255))
    big = Image.new("RGBA", (9000, 7000), (255, 255, 255, 255))
    small.save(path, "TIFF", save_all=True, append_images=[big], compression="tiff_adobe_deflate")
    assert path.stat().st_size < MAX_DOCUMENT_BYTES


def write_corpus(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "photo.png").write_bytes(samples.png(300, 200, seed=3))
    (folder / "report.pdf").write_bytes(samples.pdf_of_sizes([(200, 150), (210, 150)]))
    (folder / "requests.jsonl").write_text(chat_line("good") + "\n" + deep_line("deep") + "\n")
    (folder / "bomb.tif").write_bytes(tiff_header_only(20_000, 10_000))
    (folder / "bomb.png").write_bytes(png_header_only(20_000, 10_000))
    memory_hog_tiff(folder / "oom.tif")


@pytest.fixture(scope="module")
def ran(cluster, real_node, product_images, ocr_crd, tiny_model_volume, tmp_path_factory):
    namespace = f"t-realnode-poison-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    workdir = tmp_path_factory.mktemp("poison")
    data = Path(cluster.workdir) / f"poison-data-{namespace}"
    write_corpus(data / "in")
    (data / "out").mkdir()
    for path in [data, *data.rglob("*")]:  # the workers run as uid 65532; hostPath keeps the modes
        path.chmod(0o755 if path.is_dir() else 0o644)
    (data / "out").chmod(0o777)
    op = batch_operator(cluster, namespace, workdir / "operator.log", product_images, 2)
    ocr = OcrHelpers(cluster, namespace)
    try:
        cluster.wait_default_serviceaccount(namespace)
        op.start()
        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            hostpath_claim(cluster, namespace, data, "poison-data", "ReadWriteOnce", f"poison-data-{namespace}")
            ocr.apply(real_ocrservice(NAME, product_images.on_node("server"),
                                      model={"pvc": {"claimName": model, "subPath": "weights"}}))
            wait_server_pod_ready(cluster, namespace, NAME)
            spec = {"service": NAME, "input": {"pvc": {"claimName": "poison-data", "path": "/in"}},
                    "output": {"pvc": {"claimName": "poison-data", "path": "/out"}},
                    "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 1, "concurrencyPerWorker": 4,
                    "limits": {"maxDocumentBytes": MAX_DOCUMENT_BYTES}}
            t0 = time.monotonic()
            ocr.apply({"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": BATCH},
                       "spec": spec})

            def ended() -> dict | None:
                st = (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}
                return st if st.get("phase") in ("Succeeded", "Failed", "Cancelled") else None

            final = wait_for(ended, timeout=600, interval=1, message=f"OcrBatch {BATCH} ended")
            pods = worker_pods(cluster, namespace, BATCH)
            exits = [(cs.get("state") or {}).get("terminated", {}) for p in pods
                     for cs in p.get("status", {}).get("containerStatuses", [])]
            print(f"\nOcrBatch {BATCH}: {final.get('phase')} in {time.monotonic() - t0:.1f}s; worker exits: "
                  f"{[(e.get('reason'), e.get('exitCode')) for e in exits]}")
            yield {"status": final, "out": data / "out", "exits": exits}
    except Exception:
        print_operator_log(op)
        raise
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def results_of(out: Path, document: str) -> list[dict]:
    [path] = [p for p in (out / "results").glob("*.jsonl")
              if re.fullmatch(rf"{re.escape(document)}\.[0-9a-f]{{16}}\.jsonl", p.name)]
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_poisoned_batch_succeeds_counting_the_bad_documents_failed(ran):
    st = ran["status"]
    assert st["phase"] == "Succeeded", st
    assert st["documents"] == {"total": 6, "done": 3, "failed": 3}, st


def test_every_good_page_has_its_result_exactly_once(ran):
    for document, pages in GOOD_PAGES.items():
        records = results_of(ran["out"], document)
        assert [r["page"] for r in records] == list(range(1, pages + 1)), document
        assert all("error" not in r for r in records), records
    lines = results_of(ran["out"], "requests.jsonl")
    assert [(x["custom_id"], x["error"] is None) for x in lines] == [("good", True), ("deep", False)]


def test_each_bad_document_is_in_the_errors_files_with_its_reason_the_oom_one_as_poison(ran):
    errors = [json.loads(line) for f in (ran["out"] / "errors").glob("*.jsonl") for line in f.read_text().splitlines()]
    by_document = {e["document"]: e for e in errors}
    assert set(by_document) == {*BAD, "requests.jsonl"}, errors
    for document, reason in BAD.items():
        assert reason in by_document[document]["error"], by_document[document]
    assert by_document["requests.jsonl"]["error"] == "line 2 is nested more than 64 deep"
