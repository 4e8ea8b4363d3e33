"""The OcrBatch preflight of an S3 input (ocrbatch.preflight.s3_input_error) against a real versitygw:
what the credentials Secret holds is used as the workers would use it, before any Job starts."""

from __future__ import annotations

import asyncio
import base64

import boto3
import pytest

from localcluster.s3server import S3Server
from ocr_operator.ocrbatch import egress
from ocr_operator.ocrbatch.preflight import s3_input_error


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    """The test's S3 server is on loopback, which the operator lists only when its allowlist says so."""
    monkeypatch.setenv(egress.ALLOW_ENV, "127.0.0.1/32")


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        client = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=server.access_key,
                              aws_secret_access_key=server.secret_key, region_name=server.region)
        client.create_bucket(Bucket="docs")
        for key in ("in/a.pdf", "in/b.png"):
            client.put_object(Bucket="docs", Key=key, Body=b"x")
        yield server


def secret(s3, **over) -> dict[str, str]:
    data = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            "AWS_ENDPOINT_URL": s3.endpoint, "AWS_REGION": s3.region, **over}
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}  # a Secret's data


def check(url: str, data: dict[str, str]) -> str | None:
    return asyncio.run(s3_input_error({"url": url, "credentialsSecret": "s3"}, data))


def test_an_input_prefix_with_documents_passes(s3):
    assert check("s3://docs/in/", secret(s3)) is None


def test_an_input_prefix_without_objects_is_named(s3):
    assert check("s3://docs/2027/", secret(s3)).startswith("no object under s3://docs/2027/")


def test_a_missing_bucket_refused_credentials_and_no_answer_are_named(s3):
    assert check("s3://nobucket/in/", secret(s3)).startswith("bucket 'nobucket' does not exist")
    refused = check("s3://docs/in/", secret(s3, AWS_SECRET_ACCESS_KEY="wrong-secret-key-0000"))
    assert "rejected the credentials" in refused and refused.endswith("check the credentials Secret"), refused
    assert s3.access_key not in refused  # the message travels to the batch's status
    assert "no answer from http://127.0.0.1:1" in check("s3://docs/in/", secret(s3, AWS_ENDPOINT_URL="http://127.0.0.1:1"))


def test_an_endpoint_inside_the_operators_network_is_left_to_the_workers(s3, monkeypatch):
    # Without the allowlist the loopback endpoint is not contacted at all: not even a missing
    # bucket is reported (the error would tell the tenant what answers there); the workers check it.
    monkeypatch.delenv(egress.ALLOW_ENV)
    assert check("s3://nobucket/in/", secret(s3)) is None
    assert check("s3://docs/in/", secret(s3, AWS_ENDPOINT_URL="http://169.254.169.254")) is None

