"""A storage outage mid-batch (ocr_batch_worker.patience), end to end on this machine: the worker
(`python -m ocr_batch_worker`, a real process) reads its documents from and writes its results to
the real S3 server (versitygw), which is stopped for a few seconds while the batch runs and then
started again on the same port with the same data. The worker waits it out and ends well, every
document with its result exactly once. (The 30 s outage on the real node is the e2e's.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import boto3
from PIL import Image

from localcluster.s3server import S3Server
from ocr_batch_worker.contract import EXIT_DONE

from .pageserver import PageServer
from .test_patience import restart_same_port

ROOT = Path(__file__).resolve().parents[3]
DOCUMENTS = 24


def test_an_s3_outage_mid_batch_is_waited_out_and_every_document_is_done_once():
    with S3Server() as s3, PageServer(delay=0.25) as ocr:
        client = boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                              aws_secret_access_key=s3.secret_key, region_name=s3.region)
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=bucket)
        for i in range(DOCUMENTS):
            img = io.BytesIO()
            Image.new("RGB", (40 + i, 30), (i, 0, 0)).save(img, "PNG")
            client.put_object(Bucket=bucket, Key=f"in/p{i:02d}.png", Body=img.getvalue())
        env = {**os.environ, "BATCH_CONFIG": json.dumps({
            "serviceUrl": ocr.url, "input": {"s3": {"url": f"s3://{bucket}/in/"}},
            "output": {"s3": {"url": f"s3://{bucket}/out/"}}, "concurrencyPerWorker": 2, "maxRetries": 0,
            "progressIntervalSeconds": 0.5, "limits": {"storageRetrySeconds": 120}})}
        for role in ("INPUT", "OUTPUT"):
            env |= {f"{role}_AWS_ACCESS_KEY_ID": s3.access_key, f"{role}_AWS_SECRET_ACCESS_KEY": s3.secret_key,
                    f"{role}_AWS_ENDPOINT_URL": s3.endpoint}
        start = time.monotonic()
        worker = subprocess.Popen([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.5)  # a few documents done, most not
        outage = threading.Thread(target=restart_same_port, args=(s3, 6.0))
        outage.start()
        _, stderr = worker.communicate(timeout=180)
        outage.join()
        took = time.monotonic() - start
        log = stderr.decode(errors="replace")
        assert worker.returncode == EXIT_DONE, log[-3000:]
        assert "again in" in log  # it did meet the outage
        keys = [o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/")
                for o in page.get("Contents", [])]
        results = sorted(k for k in keys if k.startswith("out/results/") and k.endswith(".jsonl"))
        assert [k.split("/")[-1].split(".")[0] for k in results] == [f"p{i:02d}" for i in range(DOCUMENTS)]
        assert not any(k.startswith("out/errors/") for k in keys)
        progress = json.loads(client.get_object(Bucket=bucket, Key="out/progress/index-00000.json")["Body"].read())
        assert (progress["documents_done"], progress["pages_done"], progress["finished"]) == (DOCUMENTS, DOCUMENTS, True)
        assert took > 6.0
