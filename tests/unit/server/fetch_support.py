"""Helpers for the model fetcher's tests: a bucket of small "weights" on a real versitygw, and the
fetcher's settings pointing at it."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from pathlib import Path

import boto3

from ocr_server.fetch.report import Reporter
from ocr_server.fetch.settings import Settings

# Three files, one over the 1 MiB chunk the tests use, so it comes in ranged parts.
WEIGHTS = {
    "config.json": b'{"model_type": "tiny"}',
    "model.safetensors": bytes(range(256)) * (5 * 4096 + 7),  # ~5 MiB
    "sub/tokenizer.json": b'{"vocab": {}}' * 100,
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def checksums(files: dict[str, bytes] = WEIGHTS) -> dict[str, str]:
    return {name: sha(data) for name, data in files.items()}


def admin(s3):
    return boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                        aws_secret_access_key=s3.secret_key, region_name=s3.region)


def upload(s3, files: dict[str, bytes] = WEIGHTS, prefix: str = "models/tiny/", with_list: bool = False) -> str:
    """A new bucket with `files` under `prefix`; returns the bucket's name."""
    client = admin(s3)
    bucket = f"m-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    for name, data in files.items():
        client.put_object(Bucket=bucket, Key=prefix + name, Body=data)
    if with_list:
        client.put_object(Bucket=bucket, Key=prefix + "model-checksums.json", Body=json.dumps(checksums(files)).encode())
    return bucket


def settings(s3, bucket: str, tmp: Path, *, given: dict[str, str] | None = None, prefix: str = "models/tiny/",
             cache: Path | None = None, **overrides) -> Settings:
    """Settings as the init container gets them; `given` is spec.model.checksums (None: not set)."""
    checksums_file = None
    if given is not None:
        checksums_file = tmp / "config" / "model-checksums.json"
        checksums_file.parent.mkdir(parents=True, exist_ok=True)
        checksums_file.write_text(json.dumps(given))
    values = dict(bucket=bucket, prefix=prefix, cache_dir=cache or tmp / "cache", link=tmp / "models" / "org" / "tiny",
                  checksums_file=checksums_file, access_key=s3.access_key, secret_key=s3.secret_key,
                  endpoint_url=s3.endpoint, region=s3.region, chunk_bytes=1 << 20, concurrency=4,
                  stall_seconds=10, timeout_seconds=60, progress_seconds=0)
    values.update(overrides)
    return Settings(**values)


def reporter(tmp: Path) -> tuple[Reporter, io.StringIO]:
    out = io.StringIO()
    return Reporter(out=out, every=0, termination_log=tmp / "termination-log"), out


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def gets(s3) -> list[str]:
    """Every GetObject so far (versitygw's access log)."""
    return [op for _client, op in s3.clients() if op == "s3_GetObject"]
