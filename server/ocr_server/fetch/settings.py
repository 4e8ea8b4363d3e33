"""The fetcher's settings, from the init container's environment (the operator renders them)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from ocr_limits.outages import DEFAULT_FETCH_OUTAGE_SECONDS

from . import FETCH_FAILED, FetchError

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
GiB = 1 << 30

# Defaults: bounds that hold a 6.8 GB model with room, and stop a wrong prefix (a whole bucket of
# data) or a store that stopped sending before the pod's startup budget is spent.
DEFAULTS = {
    "FETCH_MAX_OBJECTS": 1000,
    "FETCH_MAX_TOTAL_BYTES": 256 * GiB,
    "FETCH_TIMEOUT_SECONDS": 3600,
    "FETCH_STALL_SECONDS": 120,
    "FETCH_CACHE_MAX_BYTES": 0,  # 0: no eviction
    "FETCH_CONCURRENCY": 8,
    "FETCH_CHUNK_BYTES": 16 << 20,
    "FETCH_PROGRESS_SECONDS": 2,
    # The longest S3 outage waited out (spec.model.source.s3.maxOutageSeconds); 0: none.
    "FETCH_MAX_OUTAGE_SECONDS": DEFAULT_FETCH_OUTAGE_SECONDS,
}
ZERO_ALLOWED = ("FETCH_CACHE_MAX_BYTES", "FETCH_MAX_OUTAGE_SECONDS")


@dataclass(frozen=True)
class Settings:
    bucket: str
    prefix: str  # "" or ending in "/"
    cache_dir: Path  # the cache volume's mount: published keys, staging, locks
    link: Path | None  # where the server looks for the model: a symlink to the published key
    checksums_file: Path | None  # spec.model.checksums as rendered (absent: the store's file is required)
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    max_objects: int = DEFAULTS["FETCH_MAX_OBJECTS"]
    max_total_bytes: int = DEFAULTS["FETCH_MAX_TOTAL_BYTES"]
    timeout_seconds: float = DEFAULTS["FETCH_TIMEOUT_SECONDS"]
    stall_seconds: float = DEFAULTS["FETCH_STALL_SECONDS"]
    cache_max_bytes: int = DEFAULTS["FETCH_CACHE_MAX_BYTES"]
    concurrency: int = DEFAULTS["FETCH_CONCURRENCY"]
    chunk_bytes: int = DEFAULTS["FETCH_CHUNK_BYTES"]
    progress_seconds: float = DEFAULTS["FETCH_PROGRESS_SECONDS"]
    max_outage_seconds: float = DEFAULTS["FETCH_MAX_OUTAGE_SECONDS"]

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def parse_url(url: str) -> tuple[str, str]:
    """`s3://bucket/prefix` -> (bucket, "prefix/"); a bad URL is a ModelFetchFailed naming FETCH_URL."""
    parts = urlsplit(url or "")
    prefix = parts.path.strip("/")
    if (parts.scheme != "s3" or not _BUCKET.fullmatch(parts.netloc) or parts.query or parts.fragment
            or any(p in ("", ".", "..") for p in prefix.split("/")) and prefix):
        raise FetchError(FETCH_FAILED, f"FETCH_URL: {url!r} is not an s3://bucket/prefix URL")
    return parts.netloc, prefix + "/" if prefix else ""


def _number(env: Mapping[str, str], name: str, kind=int):
    raw = env.get(name, "")
    if raw == "":
        return DEFAULTS[name]
    try:
        value = kind(raw)
    except ValueError:
        raise FetchError(FETCH_FAILED, f"{name}: {raw!r} is not a number") from None
    if value < 0 or (value == 0 and name not in ZERO_ALLOWED):
        raise FetchError(FETCH_FAILED, f"{name}: {raw!r} must be positive")
    return value


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    bucket, prefix = parse_url(env.get("FETCH_URL", ""))
    if not env.get("FETCH_CACHE_DIR"):
        raise FetchError(FETCH_FAILED, "FETCH_CACHE_DIR is not set (the cache volume's mount)")
    return Settings(
        bucket=bucket, prefix=prefix, cache_dir=Path(env["FETCH_CACHE_DIR"]),
        link=Path(env["FETCH_LINK"]) if env.get("FETCH_LINK") else None,
        checksums_file=Path(env["FETCH_CHECKSUMS_FILE"]) if env.get("FETCH_CHECKSUMS_FILE") else None,
        access_key=env.get("AWS_ACCESS_KEY_ID") or None, secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
        endpoint_url=env.get("AWS_ENDPOINT_URL") or None, region=env.get("AWS_REGION") or None,
        max_objects=_number(env, "FETCH_MAX_OBJECTS"), max_total_bytes=_number(env, "FETCH_MAX_TOTAL_BYTES"),
        timeout_seconds=_number(env, "FETCH_TIMEOUT_SECONDS", float),
        stall_seconds=_number(env, "FETCH_STALL_SECONDS", float),
        cache_max_bytes=_number(env, "FETCH_CACHE_MAX_BYTES"), concurrency=_number(env, "FETCH_CONCURRENCY"),
        chunk_bytes=_number(env, "FETCH_CHUNK_BYTES"),
        progress_seconds=_number(env, "FETCH_PROGRESS_SECONDS", float),
        max_outage_seconds=_number(env, "FETCH_MAX_OUTAGE_SECONDS", float))
