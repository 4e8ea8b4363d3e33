"""The batch worker's S3 store (ocr_batch_worker.s3.S3Store) against a real S3 server: versitygw
with its POSIX backend (localcluster/s3server.py, built by `make versitygw`, cached by version).
One server for the module, one bucket per test; no cluster."""

from __future__ import annotations

import uuid

import boto3
import pytest

from localcluster.ports import free_port
from localcluster.s3server import S3Server
from ocr_batch_worker.s3 import (BucketNotFound, CredentialsRejected, ObjectNotFound, PrefixNotFound, S3Store,
                                   S3Unreachable)
from ocr_batch_worker.storage import ObjectTooLarge, Store, TooManyObjects


@pytest.fixture(scope="module")
def s3():
    with S3Server() as server:
        yield server


@pytest.fixture(scope="module")
def admin(s3):
    """A plain boto3 client with the server's root keys: what a user's own tools would do."""
    return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                        aws_secret_access_key=s3.secret_key, region_name=s3.region)


@pytest.fixture
def bucket(admin) -> str:
    name = f"t-{uuid.uuid4().hex[:12]}"
    admin.create_bucket(Bucket=name)
    return name


def store(s3, bucket: str, prefix: str = "in/", access_key: str | None = None, secret_key: str | None = None) -> S3Store:
    return S3Store(s3.endpoint, bucket, prefix, access_key or s3.access_key, secret_key or s3.secret_key)


def test_objects_put_under_the_prefix_are_listed_read_and_found_by_their_relative_keys(s3, admin, bucket):
    inp = store(s3, bucket, "in/")
    assert isinstance(inp, Store)  # the worker's storage interface, as FileStore
    inp.put("b/scan.png", b"png")
    inp.put("a.pdf", b"%PDF-1.7 x")
    inp.put("empty.pdf", b"")
    store(s3, bucket, "out/").put("a.pdf.jsonl", b"{}")  # another prefix of the bucket: not listed
    admin.put_object(Bucket=bucket, Key="in/c/", Body=b"")  # a console's "folder": not a document
    assert inp.list(limit=10) == [("a.pdf", 10), ("b/scan.png", 3), ("empty.pdf", 0)]
    assert inp.get("a.pdf", max_bytes=10) == b"%PDF-1.7 x"
    assert inp.get("empty.pdf", max_bytes=10) == b""
    assert inp.exists("b/scan.png") and inp.exists("empty.pdf") and not inp.exists("b/other.png")
    inp.put("a.pdf", b"new")  # replaced whole
    assert inp.get("a.pdf", max_bytes=10) == b"new"


def test_object_over_max_bytes_is_refused_and_a_listing_over_its_limit_too(s3, bucket):
    inp = store(s3, bucket)
    inp.put("big.pdf", b"x" * 1001)
    inp.put("small.pdf", b"x")
    with pytest.raises(ObjectTooLarge, match="big.pdf is 1001 bytes; the limit is 1000"):
        inp.get("big.pdf", max_bytes=1000)
    with pytest.raises(TooManyObjects, match="more than 1 objects"):
        inp.list(limit=1)


def test_missing_bucket_prefix_or_key_each_raise_the_error_naming_it(s3, bucket):
    with pytest.raises(BucketNotFound, match="bucket 'no-such-bucket' does not exist"):
        store(s3, "no-such-bucket").list(limit=10)
    with pytest.raises(BucketNotFound):
        store(s3, "no-such-bucket").put("a.pdf", b"x")
    with pytest.raises(PrefixNotFound, match=f"no object under s3://{bucket}/nothing-here/"):
        store(s3, bucket, "nothing-here").list(limit=10)
    with pytest.raises(ObjectNotFound, match=f"s3://{bucket}/in/gone.pdf does not exist"):
        store(s3, bucket).get("gone.pdf", max_bytes=10)


def test_wrong_secret_or_unknown_access_key_raise_credentials_rejected_not_not_found(s3, bucket):
    store(s3, bucket).put("a.pdf", b"x")
    wrong_secret = store(s3, bucket, secret_key="not-the-secret")
    unknown_key = store(s3, bucket, access_key="nobody", secret_key="not-the-secret")
    for bad in (wrong_secret, unknown_key):
        with pytest.raises(CredentialsRejected, match="check the credentials Secret"):
            bad.list(limit=10)
        with pytest.raises(CredentialsRejected):
            bad.put("b.pdf", b"x")
        # versitygw answers an unknown key with 404: exists() must not take that for "no object".
        with pytest.raises(CredentialsRejected):
            bad.exists("a.pdf")


def test_endpoint_that_does_not_answer_raises_unreachable_naming_it():
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(S3Unreachable, match=f"no answer from {endpoint}"):
        S3Store(endpoint, "docs", "in/", "key", "secret").exists("a.pdf")
