"""An OcrBatch with S3 input and output under the Helm-installed operator, whose chart ships its
NetworkPolicy (egress to the API server only, no DNS), on the REAL node (issue 35, item 5).

The operator never connects to a batch's storage: its worker pods list the input (the input's check
at start) and read and write S3; so the batch runs under the chart's policy as shipped. The chart is
installed with its default `networkPolicy` (enabled: only the image, the node placement, namespaced
RBAC and a shorter liveness probe differ, as in test_realnode_operator.py), the operator image
built from Dockerfile.operator, and its pod on `real-node-0`; the OcrService's pod and the two
worker pods run there too, and reach the harness's S3 server (versitygw) at the node's IP.

The harness's CNI does NOT enforce NetworkPolicy: the real node's pods are wired by the plain
`bridge` + `host-local` + `portmap` plugins (localcluster/nodeconfig.py), which ignore it, so the
policy alone proves nothing here. The test therefore asserts what the policy would have stopped:
versitygw's access log, which records every S3 request's client address, shows only the worker
pods' addresses (and this test's own, on loopback), never the operator pod's. To make that a
real check, the chart's `callbacks.allowCidrs` names the S3 server's address: an operator that
still listed S3 inputs itself (before this change its egress guard applied to S3 endpoints too,
and skipped a private one unless allowlisted) would have connected from its pod. The policy is
still checked as rendered: it exists, selects the operator pod, and opens no egress to S3.

The batch is created suspended (spec.suspend: a queued batch): its Job exists without pods, the
batch is Suspended; the test then resumes it, which the operator does by patching the Job under the
chart's RBAC (a missing `patch` on jobs would leave it Suspended). Ended, the batch is deleted by the
operator after its spec.ttlSecondsAfterFinished (a `delete` of ocrbatches under the same RBAC), and
the garbage collector takes its Job and workers' pods with it.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections import Counter

import pytest
import yaml

from localcluster.nodeconfig import NODE_IP, NODE_NAME, POD_CIDR
from localcluster.s3server import LOOPBACK, S3Server
from localcluster.waiting import wait_for
from tests.e2e.batch_support import pod_batch_requests, s3_client, wait_server_pod_ready, worker_pods
from tests.e2e.realnode_fixtures import real_ocrservice, server_pods, tiny_model_claim
from tests.e2e.test_chart import CHART, helm
from tests.e2e.test_realnode_operator import chart_values, operator_pod
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(1800)]  # a cold node imports images

NAME, BATCH, BUCKET = "reader", "archive", "docs"
# Not test_realnode_operator's "ocr-node" nor test_chart's "ocr": the chart's ClusterRoles are named
# after the release, and the modules may run at once on the workers that share the cluster.
RELEASE = "ocr-batch"
PNG_PAGES = 8
PDF_PAGES = 3
PAGES = PNG_PAGES + PDF_PAGES
TTL_SECONDS = 10


def documents() -> dict[str, tuple[bytes, int]]:
    """name -> (bytes, pages): 8 one-page PNGs and a 3-page PDF."""
    docs = {f"in/p{i}.png": (samples.png(180 + 6 * i, 140, seed=700 + i), 1) for i in range(PNG_PAGES)}
    docs["in/scans/report.pdf"] = (samples.pdf_of_sizes([(200 + 10 * i, 150) for i in range(PDF_PAGES)]), PDF_PAGES)
    return docs




def ocrbatch() -> dict:
    spec = {"service": NAME,
            "input": {"s3": {"url": f"s3://{BUCKET}/in/", "credentialsSecret": "s3"}},
            "output": {"s3": {"url": f"s3://{BUCKET}/out/", "credentialsSecret": "s3"}},
            "options": {"mode": "free", "maxNewTokens": 2}, "parallelism": 2, "concurrencyPerWorker": 2,
            "suspend": True,  # queued: resumed by the test, a Job patch under the chart's RBAC
            "ttlSecondsAfterFinished": TTL_SECONDS}  # then deleted by the operator: a delete under the chart's RBAC
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrBatch", "metadata": {"name": BATCH}, "spec": spec}


def egress_peers(policy: dict) -> list[str]:
    """Every egress rule's peers and ports, as text (what the operator pod may connect to)."""
    return [json.dumps(rule, sort_keys=True) for rule in policy["spec"].get("egress", [])]


def test_an_s3_batch_succeeds_under_the_helm_installed_operator_and_its_networkpolicy_with_no_operator_s3_call(
        cluster, real_node, namespace, ocr, ocr_crd, product_images, tiny_model_volume, tmp_path):
    image = product_images.on_node("operator")
    values = {**chart_values(image), "callbacks": {"allowCidrs": [f"{NODE_IP}/32"]}}
    assert "networkPolicy" not in values  # the chart's own policy, as shipped
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    s3 = S3Server(hosts=(LOOPBACK, NODE_IP), access_log=True)
    t0 = time.monotonic()
    try:
        s3.start()
        bucket = s3_client(s3)
        bucket.create_bucket(Bucket=BUCKET)
        docs = documents()
        for key, (body, _) in docs.items():
            bucket.put_object(Bucket=BUCKET, Key=key, Body=body)
        cluster.kubectl("create", "secret", "generic", "s3", "-n", namespace,
                        f"--from-literal=AWS_ACCESS_KEY_ID={s3.access_key}",
                        f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret_key}",
                        f"--from-literal=AWS_ENDPOINT_URL={s3.endpoint_for(NODE_IP)}",
                        f"--from-literal=AWS_REGION={s3.region}")
        helm(cluster, "install", RELEASE, str(CHART), "-n", namespace, "-f", str(tmp_path / "values.yaml"), "--wait",
             "--timeout", "180s", timeout=200)
        operator = operator_pod(cluster, namespace, RELEASE)
        operator_ip = operator["status"]["podIP"]
        assert operator["spec"]["nodeName"] == NODE_NAME and operator["spec"]["containers"][0]["image"] == image

        # The chart's NetworkPolicy, as rendered: it selects the operator pod, and no egress rule
        # opens the S3 server (its address or its port) or DNS.
        [policy] = [p for p in ocr.list("networkpolicy", f"app.kubernetes.io/instance={RELEASE}")
                    if p["spec"]["podSelector"]["matchLabels"].items() <= operator["metadata"]["labels"].items()]
        assert "Egress" in policy["spec"]["policyTypes"]
        peers = egress_peers(policy)
        assert not any(NODE_IP in p or f'"port": {s3.port}' in p or '"port": 53' in p for p in peers), peers

        with tiny_model_claim(cluster, namespace, tiny_model_volume) as model:
            ocr.apply(real_ocrservice(NAME, product_images.on_node("server"),
                                      model={"pvc": {"claimName": model, "subPath": "weights"}}))
            wait_server_pod_ready(cluster, namespace, NAME)
            [server] = server_pods(cluster, namespace, NAME)
            before = pod_batch_requests(server)
            ocr.apply(ocrbatch())
            queued = wait_for(lambda: (s := (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}).get("phase")
                              == "Suspended" and s, timeout=60, interval=0.5, message="the batch queued, Suspended")
            assert (ocr.get("job", BATCH) or {})["spec"]["suspend"] is True
            assert worker_pods(ocr.cluster, ocr.ns, BATCH) == [], "a batch created suspended started workers"
            ready = time.monotonic()
            ocr.patch("ocrbatch", BATCH, {"spec": {"suspend": False}})  # the operator patches its Job: RBAC
            st = wait_for(lambda: (s := (ocr.get("ocrbatch", BATCH) or {}).get("status") or {}).get("phase")
                          in ("Succeeded", "Failed") and s, timeout=300, interval=0.5, message="the batch ended")
            took = time.monotonic() - ready
            sent = pod_batch_requests(server) - before
            workers = worker_pods(ocr.cluster, ocr.ns, BATCH)
            results = [o["Key"] for page in bucket.get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix="out/results/") for o in page.get("Contents", []) if o["Key"].endswith(".jsonl")]
            lines = {k: bucket.get_object(Bucket=BUCKET, Key=k)["Body"].read().decode().splitlines() for k in results}
            ended = time.monotonic()
            wait_for(lambda: ocr.get("ocrbatch", BATCH) is None, timeout=TTL_SECONDS + 60, interval=0.5,
                     message="the ended batch deleted (spec.ttlSecondsAfterFinished)")
            expired = time.monotonic() - ended
            wait_for(lambda: ocr.get("job", BATCH) is None and not worker_pods(ocr.cluster, ocr.ns, BATCH),
                     timeout=60, interval=0.5, message="its Job and workers' pods collected")
        clients = s3.clients()
    except Exception:
        logs = cluster.kubectl("logs", "-n", namespace, "-l", f"app.kubernetes.io/instance={RELEASE}",
                               "--tail=150", check=False).stdout
        print(f"\n----- operator pod log -----\n{logs}\n----- end of operator pod log -----")
        raise
    finally:
        helm(cluster, "uninstall", RELEASE, "-n", namespace, check=False)
        s3.stop()

    worker_ips = {p["status"].get("podIP") for p in workers} - {None}
    by_client = Counter(address for address, _ in clients)
    print(f"\nhelm-installed operator ({operator_ip}): OcrBatch {BATCH} {st['phase']} in {took:.1f}s "
          f"({st.get('pageSummary')} pages, {sent:.0f} batch requests answered), {time.monotonic() - t0:.1f}s in all; "
          f"S3 requests by client: {dict(by_client)}; worker pods {sorted(worker_ips)}; queued first: "
          f"{next(c['message'] for c in queued['conditions'] if c['type'] == 'Ready')}; deleted {expired:.1f}s after "
          f"the test saw its end (ttl {TTL_SECONDS}s)")
    assert st["phase"] == "Succeeded", st
    assert st["pages"] == {"total": PAGES, "done": PAGES, "failed": 0}, st
    # Every page's result exactly once: one result object per document, one line per page, and the
    # server's own count of batch pages answered is the page count.
    per_document = Counter(k.removeprefix("out/results/").rsplit(".", 2)[0] for k in results)
    assert per_document == Counter({key.removeprefix("in/"): 1 for key in docs}), per_document
    for key, text in lines.items():
        pages = docs["in/" + key.removeprefix("out/results/").rsplit(".", 2)[0]][1]
        assert len(text) == pages and all(json.loads(line).get("error") is None for line in text), (key, text)
    assert sent == PAGES, sent
    # Only the workers talked to S3 (and this test, on loopback); the operator pod never did.
    assert worker_ips and all(ipaddress.ip_address(ip) in ipaddress.ip_network(POD_CIDR) for ip in worker_ips)
    assert operator_ip not in by_client, by_client
    assert set(by_client) - {LOOPBACK} <= worker_ips, (by_client, worker_ips)
    assert any(op.endswith("ListObjectsV2") for address, op in clients if address in worker_ips), clients
