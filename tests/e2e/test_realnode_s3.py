"""Pods on the REAL node reach the harness's S3 server (versitygw, localcluster/s3server.py).

The server listens on loopback and on the real node's IP (the harness bridge `cfo-node`), where pods
reach the host; the batch worker's S3Store writes an object through the node-IP endpoint, and a pod
(the harness's `causalflow-nodetest` image, on the real node) reads it back over S3 with a
presigned, SigV4-signed URL: the address, the port and the signature all work from inside a pod.
"""

from __future__ import annotations


import boto3
import botocore.config
import pytest
import yaml

from localcluster.nodeconfig import NODE_IP, NODE_NAME, NODE_SELECTOR, TOLERATION
from localcluster.s3server import LOOPBACK, S3Server
from localcluster.waiting import wait_for
from ocr_batch_worker.s3 import S3Store

pytestmark = pytest.mark.realnode


def test_pod_on_the_real_node_reads_an_object_from_the_harness_s3_server(cluster, real_node, namespace):
    with S3Server(hosts=(LOOPBACK, NODE_IP)) as s3:
        endpoint = s3.endpoint_for(NODE_IP)
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=s3.access_key,
                              aws_secret_access_key=s3.secret_key, region_name=s3.region,
                              config=botocore.config.Config(signature_version="s3v4", s3={"addressing_style": "path"}))
        client.create_bucket(Bucket="docs")
        S3Store(endpoint, "docs", "results/", s3.access_key, s3.secret_key).put("page-1.md", b"# read by a pod")
        url = client.generate_presigned_url("get_object", Params={"Bucket": "docs", "Key": "results/page-1.md"},
                                            ExpiresIn=300)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "s3-reader"}, "spec": {
            "nodeSelector": dict(NODE_SELECTOR), "tolerations": [dict(TOLERATION)], "restartPolicy": "Never",
            "automountServiceAccountToken": False, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": real_node.test_image, "imagePullPolicy": "Never",
                            "args": ["get", url],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}}]}}
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(pod))

        def finished() -> dict | None:
            got = cluster.get_object("pod", "s3-reader", namespace)
            return got if got["status"].get("phase") in ("Succeeded", "Failed") else None

        done = wait_for(finished, timeout=60, message="pod s3-reader finished")
        logs = cluster.kubectl("logs", "s3-reader", "-n", namespace).stdout
    assert done["spec"]["nodeName"] == NODE_NAME
    assert (done["status"]["phase"], logs.split("\n", 1)) == ("Succeeded", ["200", "# read by a pod\n"])
