"""An S3 prefix as a batch Store (storage.Store), through boto3.

Keys are relative to the prefix, as in storage.FileStore, so the worker cannot tell the two apart.
S3 has no directories: a "missing prefix" is one under which no object exists, and list() says so
(PrefixNotFound) instead of returning an empty input. Every failure is a storage.StoreError whose
type names what is wrong (BucketNotFound, PrefixNotFound, ObjectNotFound, CredentialsRejected,
S3Unavailable, S3Unreachable), so the worker reports it once instead of failing page by page; the
last two are transient (storage.TransientStoreError): after botocore's own few retries, the worker
waits them out within the batch's budget (patience.py).

The decisions (the URL, the names, which error an S3 answer is) are pure functions; S3Store is the
thin I/O layer over one boto3 client with bounded time (timeouts, few retries).
"""

from __future__ import annotations

import ipaddress
import re
import threading
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

import boto3
import botocore.config
import botocore.exceptions

from ocr_limits.outages import BUCKET, CREDENTIALS, MISSING, TRANSIENT, s3_answer

from .storage import (AccessRefused, LocationNotFound, ObjectTooLarge, StoreError, TooManyObjects,
                      TransientStoreError, check_key)

MAX_KEY_BYTES = 1024  # S3's limit on a whole key (prefix + relative key), in UTF-8 bytes
MAX_URL_CHARS = 2048
MAX_CREDENTIAL_CHARS = 256
PAGE_SIZE = 1000  # S3's largest ListObjectsV2 page
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_REGION = re.compile(r"[a-z0-9-]{1,32}")
# botocore's own retries, before patience.py's: a few quick ones, with its jittered backoff.
BOTO_RETRIES = {"max_attempts": 4, "mode": "standard"}
# An attempt that got no answer in time: told to patience.py at once (S3Store.attempt_timed_out).
TIMEOUTS = (botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError)
# The most of one answer read whole (a listing page, an error): a ListObjectsV2 page of 1,000 keys
# of 1,024 bytes each, escaped, is well under it; an endpoint that sends more is not read further.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class AnswerTooLarge(botocore.exceptions.BotoCoreError):
    fmt = "an answer of more than {limit} bytes from {url} (not read further)"


def bound_answers(client, limit: int | None = None) -> None:
    """Make `client` read at most `limit` bytes of any answer it reads whole (every operation but
    a streamed GET, whose reader bounds it): botocore otherwise reads an answer to its end, so an
    endpoint could fill the reader's memory with one listing page. The answer is read here, in
    the client's own HTTP session, in place of botocore's unbounded read."""
    limit = MAX_ANSWER_BYTES if limit is None else limit
    http = client._endpoint.http_session  # the session the client sends with (its proxies, TLS)

    def send(request, **_):
        if request.stream_output:
            return None  # botocore sends it; the body is read by the caller, bounded there
        request.stream_output = True
        try:
            response = http.send(request)
        finally:
            request.stream_output = False
        chunks, size = [], 0
        for chunk in response.raw.stream(65536, decode_content=False):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                response.raw.close()
                raise AnswerTooLarge(limit=limit, url=request.url.split("?", 1)[0])
        response._content = b"".join(chunks)
        return response

    client.meta.events.register("before-send.s3", send)


class S3Error(StoreError):
    """An S3 location or answer the batch cannot use; the subclass says which."""


class InvalidS3Location(S3Error):
    """The s3:// URL, the bucket, the prefix or the endpoint is malformed (the message names the field)."""


class BucketNotFound(S3Error, LocationNotFound):
    """The bucket does not exist on the endpoint."""


class PrefixNotFound(S3Error, LocationNotFound):
    """No object exists under the prefix."""


class ObjectNotFound(S3Error):
    """The key does not exist under the prefix."""


class CredentialsRejected(S3Error, AccessRefused):
    """The endpoint refused the access key or its signature (or denied access with them)."""


class S3Unavailable(S3Error, TransientStoreError):
    """The endpoint answered "later": throttling (503 SlowDown) or a failure of its own (5xx)."""


class S3Unreachable(S3Error, TransientStoreError):
    """No answer from the endpoint (connection refused or reset, timeout)."""


_session: boto3.session.Session | None = None
_session_lock = threading.Lock()


def _client(**kwargs):
    """A client from one shared boto3 session: a new session loads S3's service model again
    (~0.3 s of CPU each); creating clients under a lock is safe, and the clients themselves are
    thread-safe."""
    global _session
    with _session_lock:
        if _session is None:
            _session = boto3.session.Session()
        return _session.client("s3", **kwargs)


@dataclass(frozen=True)
class S3Location:
    bucket: str
    prefix: str  # "" or ending in "/"


def check_bucket(bucket: str, field: str = "bucket") -> str:
    """S3's bucket naming rules (3-63 lowercase letters, digits, '.', '-'; not an IP address)."""
    if not isinstance(bucket, str) or not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise InvalidS3Location(f"{field}: {bucket!r} is not a valid S3 bucket name "
                                "(3-63 lowercase letters, digits, '.' and '-', starting and ending alphanumeric)")
    try:
        ipaddress.IPv4Address(bucket)
    except ValueError:
        return bucket
    raise InvalidS3Location(f"{field}: {bucket!r} is an IP address, not a bucket name")


def check_prefix(prefix: str, field: str = "prefix") -> str:
    """The prefix as a folder: "" (the whole bucket) or relative parts ending in "/"."""
    if not isinstance(prefix, str):
        raise InvalidS3Location(f"{field}: must be a string, not {prefix!r}")
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    try:
        check_key(stripped)
    except StoreError:
        raise InvalidS3Location(f"{field}: {prefix!r} has an empty, '.' or '..' part") from None
    if len(stripped.encode()) >= MAX_KEY_BYTES:
        raise InvalidS3Location(f"{field}: {prefix!r} is longer than S3's {MAX_KEY_BYTES}-byte keys")
    return stripped + "/"


def parse_s3_url(url: str, field: str = "url") -> S3Location:
    """`s3://bucket/prefix/` -> S3Location; a bad URL raises InvalidS3Location naming `field`."""
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        raise InvalidS3Location(f"{field}: must be an s3:// URL of at most {MAX_URL_CHARS} characters")
    parts = urlsplit(url)
    if parts.scheme != "s3" or not url.startswith("s3://"):
        raise InvalidS3Location(f"{field}: {url!r} is not an s3://bucket/prefix URL")
    if parts.query or parts.fragment or "@" in parts.netloc or ":" in parts.netloc:
        raise InvalidS3Location(f"{field}: {url!r} may hold only a bucket and a prefix (no user, port, query or fragment)")
    return S3Location(check_bucket(parts.netloc, f"{field} (bucket)"), check_prefix(parts.path, f"{field} (prefix)"))


def check_endpoint(endpoint_url: str, field: str = "endpoint_url") -> str:
    """An http(s)://host[:port] URL with no path, credentials, query or fragment."""
    if not isinstance(endpoint_url, str) or len(endpoint_url) > MAX_URL_CHARS:
        raise InvalidS3Location(f"{field}: must be an http(s) URL of at most {MAX_URL_CHARS} characters")
    parts = urlsplit(endpoint_url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        raise InvalidS3Location(f"{field}: {endpoint_url!r} has an invalid port") from None
    if (parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password
            or parts.path.strip("/") or parts.query or parts.fragment):
        raise InvalidS3Location(f"{field}: {endpoint_url!r} is not an http(s)://host[:port] URL")
    return endpoint_url.rstrip("/")


def check_credential(value: str, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_CREDENTIAL_CHARS or not value.isprintable():
        raise InvalidS3Location(f"{field}: must be 1-{MAX_CREDENTIAL_CHARS} printable characters")
    return value


def full_key(prefix: str, key: str) -> str:
    """The S3 key of a relative key; refuses one S3 would refuse (too long) before sending it."""
    whole = prefix + check_key(key)
    if len(whole.encode()) > MAX_KEY_BYTES:
        raise StoreError(f"{key}: the S3 key {whole!r} is longer than {MAX_KEY_BYTES} bytes")
    return whole


def total_size(content_range: str | None, content_length: int) -> int:
    """An object's whole size from a (ranged) GET's headers: "bytes 0-9/1234" -> 1234; without a
    Content-Range (a server that ignored the range) the body is the whole object."""
    if content_range:
        total = content_range.rpartition("/")[2]
        if total.isdigit():
            return int(total)
    return content_length


def error_type(code: str, status: int | None) -> type[S3Error]:
    """Which error an S3 error answer is (ocr_limits.outages.s3_answer: its code, else its status)."""
    return {TRANSIENT: S3Unavailable, BUCKET: BucketNotFound, CREDENTIALS: CredentialsRejected,
            MISSING: ObjectNotFound}.get(s3_answer(code, status), S3Error)


class S3Store:
    """s3://bucket/prefix on one endpoint as a Store: bounded listing, size-checked reads, whole-object
    writes (an S3 PUT is atomic: a reader sees the old object or the new one)."""

    def __init__(self, endpoint_url: str, bucket: str, prefix: str, access_key: str, secret_key: str,
                 region: str = "us-east-1", *, timeouts: tuple[float, float] = (5, 60),
                 retries: dict | None = None) -> None:
        """`timeouts`: connect and read seconds; `retries`: botocore's (BOTO_RETRIES)."""
        self.endpoint_url = check_endpoint(endpoint_url)
        self.bucket = check_bucket(bucket)
        self.prefix = check_prefix(prefix)
        if not isinstance(region, str) or not _REGION.fullmatch(region):
            raise InvalidS3Location(f"region: {region!r} is not a region name (lowercase letters, digits, '-')")
        self.access_key = check_credential(access_key, "access_key")
        config = botocore.config.Config(
            connect_timeout=timeouts[0], read_timeout=timeouts[1], retries=retries or BOTO_RETRIES,
            s3={"addressing_style": "path"}, signature_version="s3v4")
        self.client = _client(
            endpoint_url=self.endpoint_url, region_name=region, config=config,
            aws_access_key_id=self.access_key, aws_secret_access_key=check_credential(secret_key, "secret_key"))
        bound_answers(self.client)
        # Told of each attempt that timed out, before botocore tries again (patience.PatientStore
        # sets it): an endpoint that never answers costs botocore's attempts times the timeout
        # (minutes) before the request fails, and the worker's report says it waits from the first.
        self.attempt_timed_out: Callable[[str], None] | None = None
        self._told = threading.local()  # whether this thread's last attempt was told so
        self.client.meta.events.register("needs-retry.s3", self._attempted)

    def _attempted(self, caught_exception: Exception | None = None, **_) -> None:
        """botocore's needs-retry event, after each attempt (returns None: botocore's own handler
        decides the retry)."""
        timed_out = isinstance(caught_exception, TIMEOUTS)
        self._told.last = timed_out and self.attempt_timed_out is not None
        if self._told.last:
            self.attempt_timed_out(f"no answer from {self.endpoint_url} ({type(caught_exception).__name__})")

    @classmethod
    def from_url(cls, url: str, endpoint_url: str, access_key: str, secret_key: str,
                 region: str = "us-east-1", **options) -> S3Store:
        loc = parse_s3_url(url)
        return cls(endpoint_url, loc.bucket, loc.prefix, access_key, secret_key, region, **options)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def _error(self, exc: Exception, what: str) -> S3Error:
        """The StoreError a boto3 failure stands for, naming the bucket, prefix or key and the answer."""
        if isinstance(exc, botocore.exceptions.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            kind = error_type(code, status)
            if kind is BucketNotFound:
                return BucketNotFound(f"bucket {self.bucket!r} does not exist on {self.endpoint_url}")
            if kind is CredentialsRejected:
                # No key ID in the message: it travels to the batch's status and errors files.
                return CredentialsRejected(f"{self.endpoint_url} rejected the credentials for {what} "
                                           f"({code or status}): check the credentials Secret")
            if kind is ObjectNotFound:
                return ObjectNotFound(f"{what} does not exist")
            if kind is S3Unavailable:
                return S3Unavailable(f"{what}: {code or status} from {self.endpoint_url}",
                                     f"{code or status} from {self.endpoint_url}")
            return S3Error(f"{what}: {code or status} from {self.endpoint_url}")
        # Refused, reset or timed out (after the client's own retries).
        if isinstance(exc, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
            err = S3Unreachable(f"{what}: no answer from {self.endpoint_url} ({exc})",
                                f"no answer from {self.endpoint_url} ({type(exc).__name__})")
            err.told = bool(getattr(self._told, "last", False))  # its last attempt was told already
            return err
        return S3Error(f"{what}: {exc}")

    def list(self, limit: int) -> list[tuple[str, int]]:
        found: list[tuple[str, int]] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self.prefix, PaginationConfig={"PageSize": PAGE_SIZE})
        try:
            for page in pages:
                for obj in page.get("Contents", []):
                    key = obj["Key"][len(self.prefix):]
                    if not key or key.endswith("/"):  # a folder marker, not a document
                        continue
                    found.append((key, int(obj["Size"])))
                    if len(found) > limit:
                        raise TooManyObjects(f"{self.url} holds more than {limit} objects")
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(exc, self.url) from None
        if not found and self.prefix:
            raise PrefixNotFound(f"no object under {self.url} (no such prefix in bucket {self.bucket!r})")
        return sorted(found)

    def _get(self, name: str, last_byte: int) -> dict | None:
        """GetObject of bytes 0..last_byte (the body unread); None for an empty object, whose every
        range is unsatisfiable (416). A GET, not a HEAD: a HEAD's error has no code, and versitygw
        answers an unknown access key with 404, which a HEAD could not tell from a missing key."""
        try:
            return self.client.get_object(Bucket=self.bucket, Key=name, Range=f"bytes=0-{last_byte}")
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return None
            raise

    def get(self, key: str, max_bytes: int) -> bytes:
        name = full_key(self.prefix, key)
        try:
            resp = self._get(name, max_bytes)
            if resp is None:
                return b""
            with resp["Body"] as body:
                size = total_size(resp.get("ContentRange"), int(resp["ContentLength"]))
                if size > max_bytes:  # decided from the headers: the body is never read
                    raise ObjectTooLarge(f"{key} is {size} bytes; the limit is {max_bytes}")
                data = body.read(max_bytes + 1)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(exc, f"s3://{self.bucket}/{name}") from None
        if len(data) > max_bytes:
            raise ObjectTooLarge(f"{key} is more than {max_bytes} bytes; the limit is {max_bytes}")
        return data

    def put(self, key: str, data: bytes) -> None:
        name = full_key(self.prefix, key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=name, Body=data)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            raise self._error(exc, f"s3://{self.bucket}/{name}") from None

    def exists(self, key: str) -> bool:
        name = full_key(self.prefix, key)
        try:
            resp = self._get(name, 0)
        except (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError) as exc:
            err = self._error(exc, f"s3://{self.bucket}/{name}")
            if isinstance(err, ObjectNotFound):
                return False
            raise err from None
        if resp is not None:
            resp["Body"].close()
        return True
