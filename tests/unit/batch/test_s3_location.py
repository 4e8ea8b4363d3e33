"""The pure parts of the batch worker's S3 store (ocr_batch_worker.s3): the s3:// URL, the endpoint,
the key, the size from a ranged GET's headers, and which error an S3 answer is."""

from __future__ import annotations

import pytest

from ocr_batch_worker.s3 import (BucketNotFound, CredentialsRejected, InvalidS3Location, ObjectNotFound, S3Error, S3Unavailable,
                                   S3Location, check_endpoint, error_type, full_key, parse_s3_url, total_size)
from ocr_batch_worker.storage import StoreError


@pytest.mark.parametrize("url, location", [
    ("s3://docs", S3Location("docs", "")),
    ("s3://docs/", S3Location("docs", "")),
    ("s3://docs/in", S3Location("docs", "in/")),
    ("s3://my.docs-2/scans/2026/", S3Location("my.docs-2", "scans/2026/")),
])
def test_s3_url_gives_the_bucket_and_a_folder_prefix(url, location):
    assert parse_s3_url(url) == location


@pytest.mark.parametrize("url, says", [
    ("https://docs/in/", "not an s3://bucket/prefix URL"),
    ("s3://Docs/in/", "(bucket)"),
    ("s3://d/in/", "(bucket)"),
    ("s3://10.0.0.1/in/", "is an IP address"),
    ("s3://docs/in//x/", "(prefix)"),
    ("s3://docs/../x/", "(prefix)"),
    ("s3://docs/in/?versionId=1", "no user, port, query or fragment"),
    ("s3://key:secret@docs/in/", "no user, port, query or fragment"),
    ("s3://docs/" + "p" * 2100, "at most 2048 characters"),
])
def test_bad_s3_url_is_refused_naming_the_field(url, says):
    with pytest.raises(InvalidS3Location, match="spec.input.s3.url") as err:
        parse_s3_url(url, field="spec.input.s3.url")
    assert says in str(err.value)


@pytest.mark.parametrize("endpoint", ["ftp://s3.local", "http://s3.local/bucket", "http://user:pw@s3.local",
                                      "http://s3.local:99999", "s3.local:9000"])
def test_endpoint_must_be_an_http_url_of_a_host_and_port(endpoint):
    with pytest.raises(InvalidS3Location, match="endpoint_url"):
        check_endpoint(endpoint)


def test_key_that_would_leave_the_prefix_or_pass_s3s_key_length_is_refused():
    assert full_key("in/", "a/b.pdf") == "in/a/b.pdf"
    for key in ("../x.pdf", "/x.pdf", "a//b.pdf"):
        with pytest.raises(StoreError, match="invalid key"):
            full_key("in/", key)
    with pytest.raises(StoreError, match="longer than 1024 bytes"):
        full_key("in/", "é" * 511)


@pytest.mark.parametrize("content_range, length, size", [
    ("bytes 0-9/1234", 10, 1234),   # the whole object's size, not the range's
    ("bytes 0-9/*", 10, 10),        # total unknown: what came
    (None, 55, 55),                 # a server that ignored the range sent the whole object
])
def test_object_size_comes_from_the_ranged_gets_headers(content_range, length, size):
    assert total_size(content_range, length) == size


@pytest.mark.parametrize("code, status, kind", [
    ("NoSuchBucket", 404, BucketNotFound),
    ("SignatureDoesNotMatch", 403, CredentialsRejected),
    ("InvalidAccessKeyId", 403, CredentialsRejected),
    ("XAdminUserNotFound", 404, CredentialsRejected),  # versitygw's answer to an unknown access key
    ("", 403, CredentialsRejected),
    ("NoSuchKey", 404, ObjectNotFound),
    ("InternalError", 500, S3Unavailable),  # transient: waited out (patience.py)
    ("SlowDown", 503, S3Unavailable),
    ("WeirdCode", 409, S3Error),
])
def test_s3_error_answer_maps_to_an_error_type_naming_what_is_wrong(code, status, kind):
    assert error_type(code, status) is kind
