"""Rollback of really broken upgrades on the REAL node, while a client keeps OCRing through the Service.

Node: every server pod here runs on `real-node-0`; the operator runs as a local process (the
`ocr_operator` fixture) and decides from the kubelet's real pod statuses. Two broken revisions,
one after the other, on a Ready OcrService (1 replica of the product's server image, weights on
the tiny-model PVC):

(a) a container that exits at startup: `spec.env` WARMUP=maybe, which the server's config check
    refuses (exit code 2, before the port opens), so the kubelet restarts it into CrashLoopBackOff;
(b) an image that does not exist (`imagePullPolicy: Never`, as for every image on this offline
    node: the kubelet reports ErrImageNeverPull, and no registry is asked).

During both, one client thread sends OCR requests (small pages, one at a time, bounded in count
and time) through the Service's ClusterIP: maxUnavailable 0 keeps the good pod serving, the bad
pod never becomes an endpoint, and the client must see zero failed requests.
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.realnode_fixtures import SteadyClient, pod_ready, real_ocrservice, server_pods, service_client, wait_service_connects
from localcluster.waiting import wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "steady"
MAX_REQUESTS, MAX_SECONDS = 400, 360



def status(ocr) -> dict:
    return (ocr.get("ocrs", NAME) or {}).get("status") or {}


def wait_rolled_back(ocr, good: str, failed_before: str | None, timeout: float = 180) -> tuple[dict, float]:
    t0 = time.monotonic()
    st = wait_for(lambda: (s := status(ocr)).get("rollout", {}).get("phase") == "RolledBack"
                  and s.get("failedRevision") not in (None, failed_before) and s.get("currentRevision") == good and s,
                  timeout=timeout, interval=0.5, message="the operator's rollback to the last good revision")
    return st, time.monotonic() - t0


def test_crashing_container_and_missing_image_are_rolled_back_while_a_client_sees_zero_failed_requests(
        cluster, namespace, ocr, ocr_operator, product_images, model_pvc):
    image = product_images.on_node("server")
    # warmup=True: no WARMUP in the good revision's env, so the rolled-back Deployment's env shows
    # the broken revision's WARMUP gone.
    ocr.apply(real_ocrservice(NAME, image, warmup=True, model={"pvc": {"claimName": model_pvc, "subPath": "weights"}}))
    ocr.wait_ready(NAME, timeout=300)
    wait_service_connects(cluster, namespace, NAME)  # the client counts a refused connect as a failure
    good = wait_for(lambda: (s := status(ocr)).get("lastGoodRevision") == s.get("currentRevision") and
                    s["lastGoodRevision"], timeout=60, message="the first revision recorded as last good")
    good_pod = next(p for p in server_pods(cluster, namespace, NAME) if pod_ready(p))["metadata"]["name"]
    client = SteadyClient(service_client(cluster, namespace, NAME), visual_tokens=256,
                          max_seconds=MAX_SECONDS, max_requests=MAX_REQUESTS)
    client.start()
    try:
        wait_for(lambda: client.ok >= 3 or client.failures, timeout=60, message="the client's first answers")

        answered_before = client.ok
        # (a) the new container exits at startup with a configuration error.
        ocr.patch("ocrs", NAME, {"spec": {"env": [{"name": "WARMUP", "value": "maybe"}]}})
        st, took_a = wait_rolled_back(ocr, good, None)
        print(f"\n(a) crashing container: spec patched -> rolled back in {took_a:.1f}s "
              f"({st['failedReason']}: {st.get('failedMessage', '')[:120]})")
        assert st["failedReason"] == "CrashLoopBackOff", st
        crashed = [p for p in server_pods(cluster, namespace, NAME)
                   if (p["status"].get("containerStatuses") or [{}])[0].get("lastState", {}).get("terminated")]
        if crashed:  # the failed pod may already be gone; when it is still there, its exit is the server's own
            term = crashed[0]["status"]["containerStatuses"][0]["lastState"]["terminated"]
            assert term["exitCode"] == 2, term
        failed_a = st["failedRevision"]

        # (b) an image the node does not have.
        missing = image.rsplit(":", 1)[0] + ":does-not-exist"
        ocr.patch("ocrs", NAME, {"spec": {"env": None, "image": missing}})
        st, took_b = wait_rolled_back(ocr, good, failed_a)
        print(f"(b) missing image: spec patched -> rolled back in {took_b:.1f}s "
              f"({st['failedReason']}: {st.get('failedMessage', '')[:120]})")
        assert st["failedReason"] == "ErrImageNeverPull", st
        deploy = ocr.get("deploy", NAME)
        assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == image
        assert not any(e.get("name") == "WARMUP" for e in deploy["spec"]["template"]["spec"]["containers"][0]["env"])
        wait_for(lambda: [p["metadata"]["name"] for p in server_pods(cluster, namespace, NAME)] == [good_pod],
                 timeout=60, message="only the good pod left")
        answered_during = client.ok - answered_before
        wait_for(lambda: client.ok >= answered_before + answered_during + 5 or client.failures, timeout=90,
                 message="5 more answers after the rollbacks")
    finally:
        client.finish()
        client.client.close()
    print(f"client: {client.ok} OCR requests answered 200 ({answered_during} while the broken revisions rolled out "
          f"and back), {len(client.failures)} failed")
    assert client.failures == [], client.failures[:10]
    assert answered_during >= 1, "no request was answered while the broken revisions rolled out"
    survivor = next(p for p in server_pods(cluster, namespace, NAME) if p["metadata"]["name"] == good_pod)
    assert pod_ready(survivor) and survivor["status"]["containerStatuses"][0]["restartCount"] == 0
    warnings = [e for e in ocr.events(NAME) if e["reason"] == "RolledBack"]
    said = " ".join(e["message"] for e in warnings)
    assert {e["type"] for e in warnings} == {"Warning"} and failed_a in said and st["failedRevision"] in said, said
