"""Weights from object storage on the REAL node: spec.model.source.s3 with versitygw and the tiny model.

The harness's S3 server (localcluster/s3server.py) listens on the node's IP, where pods reach it.
The tiny model and its checksum list (`python -m ocr_server.checksums DIR --json`, stored beside
the weights, and given as spec.model.checksums) are uploaded to s3://models/tiny/v1/; a credentials Secret holds the server's keys,
endpoint and region. An OcrService with `source.s3` and the node cache (a hostPath under the test's
own folder) becomes Ready: its pods' `model-fetch` init container downloads, verifies and publishes
the weights, and the server loads them through the link, holding its cache key's lock (shared) for
as long as it runs, so that no eviction takes it. Then, while a client OCRs through the
Service:

- v2 (the same model, a line added to its README, so another checksum list and cache key) is uploaded with
  one object corrupted after its list was made: the new revision's fetch refuses it
  (ChecksumMismatch, naming the file), the operator rolls back, and the client sees zero failures;
- back on v1, scale to zero and back: the new pod's fetch hits the node cache (no request to S3);
- cache kind EmptyDir: a new revision fetches again into the pod's own emptyDir.

Printed for the closing note: time to Ready from S3, the fetch's throughput, the cache hit's time.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from pathlib import Path

import boto3
import botocore.config
import pytest

from localcluster.imagebuild import ensure_tiny_model
from localcluster.nodeconfig import NODE_IP
from localcluster.s3server import LOOPBACK, S3Server
from localcluster.waiting import wait_for
from ocr_server.runtime.checksums import compute
from tests.e2e.realnode_fixtures import (REPO, SteadyClient, pod_ready, real_ocrservice, server_pods, service_client,
                                         wait_service_connects)

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "from-s3"
BUCKET = "models"
SECRET = "model-store"


def upload_model(client, src: Path, prefix: str, *, readme: bytes | None = None, corrupt: str | None = None) -> dict:
    """The tiny model under `prefix` with its checksum list; `corrupt` names a file whose stored
    bytes differ from the list (uploaded after the list was made)."""
    files = {p.name: p.read_bytes() for p in sorted(src.iterdir()) if p.is_file() and not p.name.startswith(".")}
    if readme is not None:
        files["README.md"] += readme  # the tiny model's marker stays
    staged = src.parent / f".s3-{prefix.strip('/').replace('/', '-')}"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    for name, data in files.items():
        (staged / name).write_bytes(data)
    sums = compute(staged)
    shutil.rmtree(staged)
    if corrupt is not None:
        files[corrupt] = files[corrupt][:-16] + b"\0" * 16
    for name, data in files.items():
        client.put_object(Bucket=BUCKET, Key=prefix + name, Body=data)
    client.put_object(Bucket=BUCKET, Key=prefix + "model-checksums.json", Body=json.dumps(sums).encode())
    return sums


def status(ocr) -> dict:
    return (ocr.get("ocrs", NAME) or {}).get("status") or {}


def fetch_log(cluster, namespace: str, pod: str) -> dict:
    """The model-fetch container's last JSON line (done or failed)."""
    out = cluster.kubectl("logs", pod, "-n", namespace, "-c", "model-fetch").stdout
    return json.loads(out.strip().splitlines()[-1])


def key_held(cache_root: Path, key: str) -> bool:
    """Whether a process holds the key's lock: an eviction's exclusive try (same kernel, same inode)."""
    fd = os.open(cache_root / ".locks" / key, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def ready_pod(cluster, namespace: str) -> dict:
    return wait_for(lambda: next((p for p in server_pods(cluster, namespace, NAME) if pod_ready(p)
                                  and not p["metadata"].get("deletionTimestamp")), None),
                    timeout=300, interval=0.5, message="a Ready pod")


def test_weights_from_s3_fetched_into_the_node_cache_refused_when_corrupt_and_reused_on_scale_up(
        cluster, namespace, ocr, ocr_operator, product_images, real_node):
    image = product_images.on_node("server")
    cache_root = Path(cluster.workdir) / f"model-cache-{namespace}"
    tiny = REPO / ensure_tiny_model(log=print)
    figures: dict[str, float] = {}
    with S3Server(hosts=(LOOPBACK, NODE_IP), access_log=True) as s3:
        admin = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                             aws_secret_access_key=s3.secret_key, region_name=s3.region,
                             config=botocore.config.Config(s3={"addressing_style": "path"}))
        admin.create_bucket(Bucket=BUCKET)
        v1 = upload_model(admin, tiny, "tiny/v1/")
        cluster.kubectl("create", "secret", "generic", SECRET, "-n", namespace,
                        f"--from-literal=AWS_ACCESS_KEY_ID={s3.access_key}",
                        f"--from-literal=AWS_SECRET_ACCESS_KEY={s3.secret_key}",
                        f"--from-literal=AWS_ENDPOINT_URL={s3.endpoint_for(NODE_IP)}",
                        f"--from-literal=AWS_REGION={s3.region}")
        source = {"s3": {"url": f"s3://{BUCKET}/tiny/v1/", "credentialsSecret": SECRET,
                         "cache": {"kind": "Node", "nodeRoot": str(cache_root)}}}
        try:
            t0 = time.monotonic()
            ocr.apply(real_ocrservice(NAME, image, model={"source": source, "checksums": v1}))
            ocr.wait_ready(NAME, timeout=360)
            figures["ready_from_s3_s"] = time.monotonic() - t0
            pod = ready_pod(cluster, namespace)
            done = fetch_log(cluster, namespace, pod["metadata"]["name"])
            assert done["event"] == "done" and done["cache"] == "miss", done
            # The running server (read-only hostPath mount) holds its key: no eviction can take it.
            assert key_held(cache_root, done["key"]), "the server holds no lock on its node-cache key"
            figures["fetch_mb_per_s"], figures["fetch_s"] = done["mb_per_s"], done["seconds"]
            figures["fetch_mb"] = done["bytes"] / 1e6
            assert ocr.condition(ocr.get("ocrs", NAME), "ModelFetching").get("reason") == "Fetched"
            wait_service_connects(cluster, namespace, NAME)
            good = wait_for(lambda: (s := status(ocr)).get("lastGoodRevision") == s.get("currentRevision")
                            and s["lastGoodRevision"], timeout=60, message="the first revision recorded as last good")

            client = SteadyClient(service_client(cluster, namespace, NAME), visual_tokens=256,
                                  max_seconds=300, max_requests=300)
            client.start()
            try:
                wait_for(lambda: client.ok >= 3 or client.failures, timeout=60, message="the client's first answers")
                v2 = upload_model(admin, tiny, "tiny/v2/", readme=b"\nv2\n", corrupt="tokenizer.json")
                source["s3"]["url"] = f"s3://{BUCKET}/tiny/v2/"
                ocr.patch("ocrs", NAME, {"spec": {"model": {"source": source, "checksums": v2}}})
                st = wait_for(lambda: (s := status(ocr)).get("rollout", {}).get("phase") == "RolledBack"
                              and s.get("failedRevision") and s, timeout=240, interval=0.5,
                              message="the corrupt revision rolled back")
                print(f"\ncorrupt v2: {st['failedReason']}: {st.get('failedMessage', '')[:200]}")
                assert st["failedReason"] == "ChecksumMismatch" and st["currentRevision"] == good, st
                assert "tokenizer.json" in st["failedMessage"], st
                answered = client.ok
                wait_for(lambda: client.ok >= answered + 3 or client.failures, timeout=60,
                         message="3 more answers after the rollback")
            finally:
                client.finish()
            print(f"client: {client.ok} answered, {len(client.failures)} failed")
            assert client.failures == [], client.failures[:10]

            # Back on v1, then scale to zero and back: the new pod hits the node cache.
            source["s3"]["url"] = f"s3://{BUCKET}/tiny/v1/"
            ocr.patch("ocrs", NAME, {"spec": {"model": {"source": source, "checksums": v1}}})
            ocr.wait_ready(NAME, timeout=120)
            ocr.patch("ocrs", NAME, {"spec": {"replicas": 0}})
            wait_for(lambda: not server_pods(cluster, namespace, NAME), timeout=120, message="no pod at zero")
            requests = len(s3.clients())
            t0 = time.monotonic()
            ocr.patch("ocrs", NAME, {"spec": {"replicas": 1}})
            pod = ready_pod(cluster, namespace)
            figures["scale_up_node_cache_s"] = time.monotonic() - t0
            hit = fetch_log(cluster, namespace, pod["metadata"]["name"])
            assert hit["cache"] == "hit", hit
            figures["node_cache_hit_fetch_s"] = hit["seconds"]
            assert len(s3.clients()) == requests  # spec.model.checksums names the key: no request to S3

            # EmptyDir: every new pod fetches again, into its own emptyDir.
            source["s3"]["cache"] = {"kind": "EmptyDir"}
            t0 = time.monotonic()
            ocr.patch("ocrs", NAME, {"spec": {"model": {"source": source}}})
            wait_for(lambda: (s := status(ocr)).get("lastGoodRevision") == s.get("currentRevision") != good
                     and s.get("rollout", {}).get("phase") == "Healthy", timeout=300, interval=0.5,
                     message="the EmptyDir revision Healthy")
            figures["emptydir_revision_s"] = time.monotonic() - t0
            pod = ready_pod(cluster, namespace)
            again = fetch_log(cluster, namespace, pod["metadata"]["name"])
            assert again["cache"] == "miss", again
            figures["emptydir_fetch_s"] = again["seconds"]
        finally:
            ocr.delete("ocrs", NAME)
            print("figures: " + json.dumps({k: round(v, 1) for k, v in figures.items()}))
    wait_for(lambda: not server_pods(cluster, namespace, NAME), timeout=120, message="pods gone")
    shutil.rmtree(cache_root, ignore_errors=True)
