"""The model cache's layout, and the server's hold on the key its weights come from.

With `spec.model.source.s3` the `model-fetch` init container (ocr_server.fetch) publishes the
weights in a cache (a node's hostPath shared by its pods, or the pod's emptyDir) and makes the
server's model directory a symlink to the published key:

    <root>/sha256-<hex>/          a published model (the server's model directory links here)
    <root>/.locks/sha256-<hex>    flock(2): exclusive by a fetcher publishing or evicting the key,
                                  shared by every server process reading it

That link is the whole contract: the server resolves its model directory and, when it lands on a
key with a lock file beside it, holds a shared lock on that file from before it reads a weight
until the process exits (the kernel drops it then, a crash included; a restarted container takes
it again before reading). Eviction takes the exclusive lock without waiting and skips a key it
cannot lock, so a key some server on the node reads is never removed. A model directory that is
not such a link (MODEL_PATH, a volume, weights in the image) holds nothing.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
from pathlib import Path

PREFIX = "sha256-"
LOCKS = ".locks"

log = logging.getLogger(__name__)


class KeyGone(RuntimeError):
    """The model directory links to a cache key that is no longer published."""


def lock_file(root: Path, key: str) -> Path:
    return root / LOCKS / key


def cache_key(model_dir: Path) -> tuple[Path, str] | None:
    """(cache root, key) when `model_dir` links to a key of a fetcher's cache, else None."""
    target = Path(os.path.realpath(model_dir))
    if not target.name.startswith(PREFIX) or not lock_file(target.parent, target.name).is_file():
        return None
    return target.parent, target.name


def try_flock(fd: int, mode: int) -> bool:
    """flock(2) `mode` (LOCK_SH or LOCK_EX) without waiting: False when another holder prevents it."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False


def hold(model_dir: Path) -> int | None:
    """A shared lock on the cache key `model_dir` links to, taken before the weights are read and
    held by the returned descriptor for the life of the process (None: not a cache key). Waits
    while a fetcher or an eviction holds the key exclusively (moments: a publish, a rename); raises
    KeyGone when the key was evicted before this process took its lock."""
    found = cache_key(model_dir)
    if found is None:
        return None
    root, key = found
    fd = os.open(lock_file(root, key), os.O_RDONLY)  # the cache is mounted read-only in the server
    try:
        if not try_flock(fd, fcntl.LOCK_SH):
            log.info("waiting for the model cache's lock of %s (a fetcher or an eviction holds it)", key)
            fcntl.flock(fd, fcntl.LOCK_SH)
        if not (root / key).is_dir():
            raise KeyGone(f"the model directory {model_dir} links to {root / key}, which the node's cache no "
                          "longer holds (evicted before this server took its lock): delete the pod so that "
                          "its model-fetch init container fetches the weights again")
    except BaseException:
        os.close(fd)
        raise
    log.info("holding the model cache's key %s while this server runs (not evicted meanwhile)", key)
    return fd
