"""The bucket, through one boto3 client: a bounded listing, small reads, and ranged GETs run on a
pool of FETCH_CONCURRENCY threads (fetcher.py splits each object into parts of FETCH_CHUNK_BYTES).

Every failure of the store is a FetchError(ModelFetchFailed) naming the URL and the answer, never
the access key; one the store may get over (no answer, a 5xx, throttling) is a StoreOutage, which
the fetch waits out within its outage budget (fetcher.py)."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable

import boto3
import botocore.config
import botocore.exceptions

from ocr_limits.outages import BUCKET, CREDENTIALS, MISSING, TRANSIENT, s3_answer

from . import FETCH_FAILED, FetchError
from .settings import Settings

BOTO_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)
# No answer, or an answer cut short: the store may come back (after botocore's own few retries).
# A ClientError is transient by its code (ocr_limits.outages.s3_answer: 5xx, throttling).
NO_ANSWER = (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError,
             botocore.exceptions.IncompleteReadError, TimeoutError, ConnectionError)
PIECE_BYTES = 256 << 10  # what one read of a ranged GET's body hands on


class StoreOutage(FetchError):
    """A failure the store may get over (no answer, a 5xx, throttling): the fetch waits it out
    within its outage budget. `why` is the failure in a few words (no key, no credentials)."""

    def __init__(self, message: str, why: str) -> None:
        super().__init__(FETCH_FAILED, message)
        self.why = why


def explain(exc: Exception, what: str, endpoint: str) -> FetchError:
    """The ModelFetchFailed a boto3 failure stands for: a StoreOutage when it may pass."""
    if isinstance(exc, botocore.exceptions.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        kind, code = s3_answer(code, status), code or str(status or "")
        if kind == TRANSIENT:
            return StoreOutage(f"{what}: {code} from {endpoint}", f"{code} from {endpoint}")
        if kind == CREDENTIALS:
            return FetchError(FETCH_FAILED, f"{endpoint} refused the credentials for {what} ({code}): "
                                            "check the credentials Secret")
        if kind == BUCKET:
            return FetchError(FETCH_FAILED, f"{what}: the bucket does not exist on {endpoint}")
        if kind == MISSING:
            return FetchError(FETCH_FAILED, f"{what}: no such object on {endpoint} ({code})")
        return FetchError(FETCH_FAILED, f"{what}: {code} from {endpoint}")
    if isinstance(exc, NO_ANSWER):
        return StoreOutage(f"{what}: no answer from {endpoint} ({type(exc).__name__}: {exc})",
                           f"no answer from {endpoint} ({type(exc).__name__})")
    return FetchError(FETCH_FAILED, f"{what}: {type(exc).__name__} from {endpoint}: {exc}")


class Bucket:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.endpoint = settings.endpoint_url or "the default S3 endpoint"
        # Read timeout below the stall bound: a GET that stopped sending is retried by botocore.
        read_timeout = max(5.0, min(60.0, settings.stall_seconds / 2))
        config = botocore.config.Config(
            connect_timeout=10, read_timeout=read_timeout, retries={"max_attempts": 4, "mode": "standard"},
            s3={"addressing_style": "path"}, signature_version="s3v4",
            max_pool_connections=settings.concurrency + 2)
        self.client = boto3.session.Session().client(
            "s3", endpoint_url=settings.endpoint_url, region_name=settings.region or "us-east-1", config=config,
            aws_access_key_id=settings.access_key, aws_secret_access_key=settings.secret_key)
        self.pool: ThreadPoolExecutor | None = None
        self.stopping = threading.Event()

    def list(self) -> dict[str, int]:
        """{relative key: size} under the prefix; more than max_objects or max_total_bytes is refused."""
        s, found, total = self.settings, {}, 0
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=s.bucket, Prefix=s.prefix)
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(s.prefix):]
                    if not key or key.endswith("/"):
                        continue  # a console's folder marker
                    found[key] = int(obj["Size"])
                    total += found[key]
                    if len(found) > s.max_objects:
                        raise FetchError(FETCH_FAILED, f"{s.url} holds more than {s.max_objects} objects "
                                                       "(FETCH_MAX_OBJECTS): is the prefix the model's?")
                    if total > s.max_total_bytes:
                        raise FetchError(FETCH_FAILED, f"{s.url} holds more than {s.max_total_bytes} bytes "
                                                       "(FETCH_MAX_TOTAL_BYTES)")
        except BOTO_ERRORS as exc:
            raise explain(exc, s.url, self.endpoint) from None
        if not found:
            raise FetchError(FETCH_FAILED, f"no object under {s.url}")
        return found

    def read_small(self, key: str, limit: int = 16 << 20) -> bytes:
        s = self.settings
        try:
            resp = self.client.get_object(Bucket=s.bucket, Key=s.prefix + key)
            with resp["Body"] as body:
                data = body.read(limit + 1)
        except BOTO_ERRORS as exc:
            raise explain(exc, f"{s.url}{key}", self.endpoint) from None
        if len(data) > limit:
            raise FetchError(FETCH_FAILED, f"{s.url}{key} is larger than {limit} bytes")
        return data

    def read_range(self, key: str, first: int, last: int, write: Callable[[bytes], None]) -> None:
        """Bytes first..last (inclusive) of the object, handed to `write` piece by piece as they
        come (a GET cut off keeps what was written); boto3's errors are raised as they are."""
        s = self.settings
        resp = self.client.get_object(Bucket=s.bucket, Key=s.prefix + key, Range=f"bytes={first}-{last}")
        got, want = 0, last - first + 1
        body = resp["Body"]  # botocore's StreamingBody (its context gives the raw stream)
        try:
            for piece in body.iter_chunks(PIECE_BYTES):
                got += len(piece)
                if got > want or self.stopping.is_set():
                    raise FetchError(FETCH_FAILED, f"{s.url}{key}: the fetch stopped" if self.stopping.is_set() else
                                     f"{s.url}{key}: {self.endpoint} answered more than the range {first}-{last}")
                write(piece)
        finally:
            body.close()

    def submit(self, fn: Callable[..., None], *args) -> Future:
        """Run `fn(*args)` on the transfer threads."""
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=self.settings.concurrency, thread_name_prefix="fetch")
        return self.pool.submit(fn, *args)

    def close(self, cancel: bool = False) -> None:
        """Wait for the transfers, or with `cancel` stop those in flight (each at its next piece)
        and drop those not started."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if cancel:
            self.stopping.set()
        pool.shutdown(wait=not cancel, cancel_futures=cancel)
