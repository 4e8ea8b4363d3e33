"""Where a batch reads its documents and writes its results: a Store, and its filesystem backend.

A Store is a flat namespace of relative keys ("a/b.pdf") under one root (a directory on a PVC,
or an S3 prefix, s3.S3Store). The worker needs four things of it, and nothing else, so every
backend behaves the same to it: a bounded, sorted listing; a read that refuses a large object
before reading it; an atomic write (a reader sees the old object or the new one, never a torn
one: results double as the "done" markers a restarted worker trusts); and an existence check.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Mapping, Protocol, runtime_checkable

from .config import ConfigError, Location

NAME_MAX = 255  # bytes of one file name on Linux filesystems (ext4, xfs, overlayfs, NFS)


class StoreError(Exception):
    """A store operation that cannot succeed as asked (the message says which key and why)."""


class TransientStoreError(StoreError):
    """A failure that may pass if the operation is tried again later: a storage outage (an S3
    5xx, throttling, a timeout, a reset connection; a full or failing volume). patience.py waits
    these out, within the batch's budget. `reason` is the failure in a few words without the key
    (e.g. "No space left on device", "503 from https://s3.example.com"): the progress report
    carries it while the worker waits, and the OcrBatch's status shows it."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or type(self).__name__
        self.told = False  # its failed try was already told to patience.Outage (s3.S3Store.attempt_timed_out)


# A full volume (space, quota), an I/O error, a stale NFS handle, a timeout: an outage of the
# volume, not a property of the document.
TRANSIENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.ESTALE, errno.ETIMEDOUT,
                              errno.EAGAIN, errno.EINTR, errno.ENOMEM, errno.EBUSY})


def os_error(key: str, what: str, exc: OSError) -> StoreError:
    """The StoreError of a filesystem failure: transient when the volume may recover."""
    if exc.errno in TRANSIENT_ERRNOS:
        return TransientStoreError(f"{key} cannot be {what}: {exc.strerror}", exc.strerror or "OSError")
    return StoreError(f"{key} cannot be {what}: {exc.strerror}")


class ObjectTooLarge(StoreError):
    """get() refused an object larger than its max_bytes, before reading it."""


class TooManyObjects(StoreError):
    """list() found more objects than its limit."""


class LocationNotFound(StoreError):
    """The store's root itself is not there: no such directory, bucket or prefix."""


class AccessRefused(StoreError):
    """The storage refused the credentials, or denied access with them."""


@runtime_checkable
class Store(Protocol):
    def list(self, limit: int) -> list[tuple[str, int]]:
        """Every object under the root as (relative key, size in bytes), sorted by key; raises
        TooManyObjects when there are more than `limit`."""

    def get(self, key: str, max_bytes: int) -> bytes:
        """The object's bytes; ObjectTooLarge when it is larger than max_bytes (decided before
        reading it), StoreError when it does not exist."""

    def put(self, key: str, data: bytes) -> None:
        """Write the object atomically (replacing any object of that key)."""

    def exists(self, key: str) -> bool:
        """Whether an object of that key exists."""


def check_key(key: str) -> str:
    """A relative key with no empty, '.' or '..' part: it cannot leave the store's root."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"invalid key {key!r}: a relative path without empty, '.' or '..' parts")
    return key


class FileStore:
    """A directory (on a PVC) as a Store. Temporary files of put() start with '.tmp-' and are not
    listed, nor is anything else hidden (a name starting with '.'), nor symbolic links: the
    listing is what a user copied in, and a link could lead out of the volume."""

    TMP_PREFIX = ".tmp-"

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        """The file of a key; a name longer than the filesystem takes is refused here, so exists()
        already says that the object can never be written."""
        for part in check_key(key).split("/"):
            if len(os.fsencode(part)) > NAME_MAX:
                raise StoreError(f"{key}: the name {part[:40]!r}... is longer than {NAME_MAX} bytes")
        return self.root / PurePosixPath(key)

    def list(self, limit: int) -> list[tuple[str, int]]:
        if not self.root.is_dir():
            raise LocationNotFound(f"{self.root} is not a directory")
        found: list[tuple[str, int]] = []
        def unreadable(exc: OSError) -> None:
            raise os_error(str(exc.filename), "listed", exc)

        for dirpath, dirnames, filenames in os.walk(self.root, onerror=unreadable):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")
                           and not os.path.islink(os.path.join(dirpath, d))]
            for name in filenames:
                path = os.path.join(dirpath, name)
                if name.startswith(".") or os.path.islink(path):
                    continue
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # removed while listed
                    continue
                except OSError as exc:
                    raise os_error(path, "listed", exc) from None
                found.append((Path(path).relative_to(self.root).as_posix(), st.st_size))
                if len(found) > limit:
                    raise TooManyObjects(f"{self.root} holds more than {limit} files")
        return sorted(found)

    def get(self, key: str, max_bytes: int) -> bytes:
        path = self._path(key)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > max_bytes:
                    raise ObjectTooLarge(f"{key} is {size} bytes; the limit is {max_bytes}")
                data = f.read(max_bytes + 1)  # the file may grow between fstat and read
        except FileNotFoundError:
            raise StoreError(f"{key} does not exist") from None
        except IsADirectoryError:
            raise StoreError(f"{key} is a directory") from None
        except OSError as exc:
            raise os_error(key, "read", exc) from None
        if len(data) > max_bytes:
            raise ObjectTooLarge(f"{key} is more than {max_bytes} bytes; the limit is {max_bytes}")
        return data

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.TMP_PREFIX, dir=path.parent)
        except OSError as exc:
            raise os_error(key, "written", exc) from None
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise os_error(key, "written", exc) from None
            raise

    def exists(self, key: str) -> bool:
        path = self._path(key)
        try:
            return path.is_file()
        except OSError as exc:  # is_file() says False for a missing file; an EIO is raised
            raise os_error(key, "read", exc) from None


def open_store(location: Location, role: str, env: Mapping[str, str] = os.environ, **s3_options: Any) -> Store:
    """The Store of the input or output (`role`): a mounted PVC directory, or an S3 prefix whose
    credentials come from <ROLE>_AWS_ACCESS_KEY_ID, <ROLE>_AWS_SECRET_ACCESS_KEY and optionally
    <ROLE>_AWS_ENDPOINT_URL and <ROLE>_AWS_REGION (the operator sets them from the location's
    credentialsSecret; the input and the output may use different Secrets)."""
    if location.kind == "pvc":
        return FileStore(location.path)
    from .s3 import S3Store  # boto3 is imported only by a worker that reads or writes S3

    prefix = f"{role.upper()}_AWS_"
    missing = [k for k in ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY") if not env.get(prefix + k)]
    if missing:
        # Both named whatever is missing: the message must not say which keys a Secret holds.
        raise ConfigError(f"{role}.s3.credentialsSecret: {prefix}ACCESS_KEY_ID and {prefix}SECRET_ACCESS_KEY "
                          "must both be set")
    region = env.get(prefix + "REGION") or "us-east-1"
    endpoint = env.get(prefix + "ENDPOINT_URL") or f"https://s3.{region}.amazonaws.com"
    try:
        return S3Store.from_url(location.path, endpoint, env[prefix + "ACCESS_KEY_ID"],
                                env[prefix + "SECRET_ACCESS_KEY"], region, **s3_options)
    except StoreError as exc:
        raise ConfigError(f"{role}.s3: {exc}") from None
