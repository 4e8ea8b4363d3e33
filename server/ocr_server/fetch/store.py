"""The bucket, through one boto3 client: a bounded listing, small reads, and the transfer manager
(boto3's TransferConfig: objects over one chunk come in ranged GETs, in parallel threads).

Every failure of the store is a FetchError(ModelFetchFailed) naming the URL and the answer, never
the access key; one the store may get over (no answer, a 5xx, throttling) is a StoreOutage, which
the fetch waits out within its outage budget (fetcher.py)."""

from __future__ import annotations

from typing import Callable

import boto3
import botocore.config
import botocore.exceptions
from boto3.s3.transfer import TransferConfig, create_transfer_manager
from s3transfer.exceptions import RetriesExceededError
from s3transfer.subscribers import BaseSubscriber

from ocr_limits.outages import BUCKET, CREDENTIALS, MISSING, TRANSIENT, s3_answer

from . import FETCH_FAILED, FetchError
from .settings import Settings

BOTO_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)
# No answer, or an answer cut short: the store may come back (after botocore's and s3transfer's own
# few retries). A ClientError is transient by its code (ocr_limits.outages.s3_answer: 5xx, throttling).
NO_ANSWER = (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError,
             botocore.exceptions.IncompleteReadError, RetriesExceededError, TimeoutError, ConnectionError)


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


class _Progress(BaseSubscriber):
    def __init__(self, on_bytes: Callable[[int], None]) -> None:
        self.on_bytes = on_bytes

    def on_progress(self, future, bytes_transferred: int, **_) -> None:
        self.on_bytes(bytes_transferred)


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
        self.transfer_config = TransferConfig(
            multipart_threshold=settings.chunk_bytes, multipart_chunksize=settings.chunk_bytes,
            max_concurrency=settings.concurrency, use_threads=True)
        self.manager = None

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

    def download(self, key: str, filename: str, on_bytes: Callable[[int], None]):
        """Start one object's download; the future's result() raises boto3's error. s3transfer
        writes into a temporary name beside `filename` and renames it once whole."""
        if self.manager is None:
            self.manager = create_transfer_manager(self.client, self.transfer_config)
        return self.manager.download(self.settings.bucket, self.settings.prefix + key, filename,
                                     subscribers=[_Progress(on_bytes)])

    def close(self, cancel: bool = False) -> None:
        """Wait for the transfers, or with `cancel` stop those in flight."""
        manager, self.manager = self.manager, None
        if manager is None:
            return
        if cancel:
            # TransferManager.shutdown(cancel=True) hands its message on as the exception type
            # (s3transfer 0.19: TypeError once a transfer is in flight); leaving its context with
            # an error cancels them as intended.
            manager.__exit__(RuntimeError, RuntimeError("model fetch stopped"), None)
        else:
            manager.shutdown()
