"""What the real-node OcrBatch tests share: the batch-class requests a server pod counted, the
operator process they run with the workers' image, the waits for the server pod, and a boto3
client on the test's S3 server."""

from __future__ import annotations

import re
from pathlib import Path

import boto3
import botocore.config
import httpx

from localcluster.waiting import wait_for
from localcluster.operator_process import OperatorProcess
from localcluster.s3server import S3Server
from ocr_operator.ocrbatch import render
from tests.e2e.operator_fixtures import operator_kubeconfig
from tests.e2e.realnode_fixtures import server_pods


def batch_requests_in(metrics: str) -> float:
    """Batch-class /v1/ocr requests answered 200, from a server's /metrics text."""
    total = 0.0
    for line in metrics.splitlines():
        m = re.match(r'ocr_requests_total\{(.*)\} (\S+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            if (labels.get("class"), labels.get("endpoint"), labels.get("status")) == ("batch", "/v1/ocr", "200"):
                total += float(m.group(2))
    return total


def pod_batch_requests(pod: dict, *, https: bool = False, timeout: float = 10) -> float:
    """The same, read from the pod's own /metrics (a pod serving HTTPS has a certificate naming
    the Service, not the pod: read unverified)."""
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    scheme = "https" if https else "http"
    # verify=False for plain HTTP too: polled every 0.5 s, a verifying client loads the CA bundle each
    # time (25 ms of CPU) for a connection that has no TLS.
    return batch_requests_in(httpx.get(f"{scheme}://{pod['status']['podIP']}:{port}/metrics", timeout=timeout,
                                       trust_env=False, verify=False).text)


def batch_operator(cluster, namespace: str, log: Path, product_images, progress_seconds: float,
                   **extra_env: str) -> OperatorProcess:
    """The operator as a local process watching `namespace`, its workers on the operator image
    imported on the node (never pulled), their progress read every `progress_seconds`."""
    return OperatorProcess(operator_kubeconfig(cluster), [namespace], log, extra_env={
        "OCR_OPERATOR_BATCH_IMAGE": product_images.on_node("operator"),
        "OCR_OPERATOR_BATCH_IMAGE_PULL_POLICY": "Never", "OCR_OPERATOR_BATCH_PROGRESS_SECONDS": str(progress_seconds),
        **extra_env})


def worker_pods(cluster, namespace: str, batch: str) -> list[dict]:
    """The pods of an OcrBatch's Job (the Job controller labels them with its name)."""
    return cluster.list_objects("pods", namespace, f"job-name={render.job_name(batch)}")


def wait_server_pod_ready(cluster, namespace: str, name: str, timeout: float = 300) -> None:
    wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True" for p in server_pods(cluster, namespace, name)
                         for c in p["status"].get("conditions", [])),
             timeout=timeout, interval=1, message="the server pod Ready")


def s3_client(s3: S3Server):
    """boto3 on the test's S3 server (path-style: the server is addressed by IP)."""
    return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                        aws_secret_access_key=s3.secret_key, region_name=s3.region,
                        config=botocore.config.Config(s3={"addressing_style": "path"}))
