"""The cache root: published models keyed by the digest of their checksum list, shared by the pods
of a node (a hostPath) or private to one pod (an emptyDir).

    <root>/sha256-<hex>/           a published model: every file verified, never written again
    <root>/.staging/sha256-<hex>/  a fetch under way (kept across restarts: verified files are not
                                   fetched again), with verified.json, its journal
    <root>/.locks/sha256-<hex>     flock(2): exclusive while one fetcher fetches and publishes the
                                   key, or evicts it; shared by the servers reading it and by the
                                   fetchers reusing it (never removed: the same inode for all)
    <root>/.trash/                 evicted keys, renamed here before they are removed

A key names its content (the sha256 of the canonical list of the files' sha256), so two
OcrServices with the same weights share one copy, and a published directory is complete or absent:
it appears by one rename of its staging directory. Use refreshes the directory's mtime; eviction
removes the least recently used keys, other than the one this fetch publishes, until the root holds
at most `max_bytes`. It never removes a key in use: one whose lock it cannot take at once (a fetcher
holds it exclusively, a server reading the key shares it: runtime/modelcache.py), nor one fetched or
hit in the last IN_USE_GRACE_SECONDS (its pod's server may not have started to hold it yet).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

from ..runtime.modelcache import LOCKS, PREFIX, lock_file, try_flock
from . import FETCH_FAILED, FetchError

JOURNAL = "verified.json"
# The init container's exit to its server's shared lock takes seconds; a key fetched or hit this
# recently counts as in use.
IN_USE_GRACE_SECONDS = 300


def normalize(checksums: Mapping[str, str]) -> dict[str, str]:
    return {name: digest.strip().lower().removeprefix("sha256:") for name, digest in sorted(checksums.items())}


def key_of(checksums: Mapping[str, str]) -> str:
    """The cache key: the sha256 of the list as canonical JSON (sorted, compact, lowercase hex)."""
    canonical = json.dumps(normalize(checksums), sort_keys=True, separators=(",", ":"))
    return PREFIX + hashlib.sha256(canonical.encode()).hexdigest()


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


def eviction_order(keys: list[tuple[float, str, int]], keep: str, now: float,
                   grace: float = IN_USE_GRACE_SECONDS) -> list[tuple[str, int]]:
    """The (key, bytes) eviction may try, least recently used first, of (mtime, key, bytes): never
    `keep`, never a key used less than `grace` seconds before `now`."""
    return [(name, size) for mtime, name, size in sorted(keys) if name != keep and now - mtime >= grace]


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root
        for sub in (".staging", LOCKS, ".trash"):
            try:
                (root / sub).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise FetchError(FETCH_FAILED, f"the cache {root} is not writable by uid {os.getuid()} "
                                               f"({exc.strerror}): its node directory must belong to the "
                                               "server's user (see the weights guide)") from None

    def published(self, key: str) -> Path:
        return self.root / key

    def staging(self, key: str) -> Path:
        return self.root / ".staging" / key

    def hit(self, key: str) -> bool:
        path = self.published(key)
        if path.is_dir():
            os.utime(path)  # used now: the last to be evicted
            return True
        return False

    @contextmanager
    def lock(self, key: str, deadline: float, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Hold the key's lock (flock: released by the kernel if the holder dies), waiting for another
        fetcher of the same key until `deadline` (time.monotonic()): exclusive to fetch and publish,
        or, when the key is published, shared like the servers that read it (they may hold it for
        days; a published key is only read, and cannot be evicted while the lock is held)."""
        fd = os.open(lock_file(self.root, key), os.O_RDWR | os.O_CREAT, 0o664)
        try:
            told = False
            while not (try_flock(fd, fcntl.LOCK_EX) or self._shared_if_published(fd, key)):
                if not told:
                    waiting()
                    told = True
                if time.monotonic() > deadline:
                    raise FetchError(FETCH_FAILED, f"another pod of this node held the cache lock of {key} "
                                                   "until FETCH_TIMEOUT_SECONDS passed")
                time.sleep(0.5)
            yield
        finally:
            os.close(fd)

    def _shared_if_published(self, fd: int, key: str) -> bool:
        if not self.published(key).is_dir() or not try_flock(fd, fcntl.LOCK_SH):
            return False
        if self.published(key).is_dir():
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)  # evicted before the lock: fetched again, exclusively
        return False

    def journal(self, key: str) -> dict[str, list]:
        """{name: [sha256, size, mtime_ns]} of the staged files already verified; stale entries
        (the file changed or went) are dropped."""
        stage = self.staging(key)
        try:
            data = json.loads((stage / JOURNAL).read_text())
        except (OSError, ValueError):
            return {}
        out = {}
        for name, entry in data.items() if isinstance(data, dict) else ():
            try:
                st = os.stat(stage / name)
            except OSError:
                continue
            if isinstance(entry, list) and len(entry) == 3 and entry[1:] == [st.st_size, st.st_mtime_ns]:
                out[name] = entry
        return out

    def record(self, key: str, journal: dict[str, list], name: str, digest: str) -> None:
        st = os.stat(self.staging(key) / name)
        journal[name] = [digest, st.st_size, st.st_mtime_ns]
        tmp = self.staging(key) / f".{JOURNAL}.{uuid.uuid4().hex}"
        tmp.write_text(json.dumps(journal, sort_keys=True))
        os.replace(tmp, self.staging(key) / JOURNAL)

    def prepare(self, key: str, wanted: Mapping[str, int]) -> dict[str, list]:
        """The staging directory, cleaned: files not verified before (a partial download, a
        temporary part file) are removed so that they restart cleanly. Returns the journal."""
        stage = self.staging(key)
        stage.mkdir(parents=True, exist_ok=True)
        journal = {n: e for n, e in self.journal(key).items() if n in wanted and e[1] == wanted[n]}
        for root, dirs, files in os.walk(stage, topdown=False):
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), stage)
                if rel not in journal and rel != JOURNAL:
                    os.unlink(os.path.join(root, name))
        return journal

    def publish(self, key: str, checksums: Mapping[str, str], file_name: str) -> Path:
        """Rename the staging directory to the key, with the list beside the weights."""
        stage = self.staging(key)
        (stage / JOURNAL).unlink(missing_ok=True)
        (stage / file_name).write_text(json.dumps(normalize(checksums), indent=2, sort_keys=True))
        target = self.published(key)
        try:
            os.rename(stage, target)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            shutil.rmtree(stage)  # published meanwhile (never with the lock held): the same content
        os.utime(target)
        return target

    def evict(self, keep: str, max_bytes: int) -> list[str]:
        """Remove least recently used keys (see eviction_order; never one whose lock is held) until
        the published keys hold at most `max_bytes`. Returns the keys removed."""
        if max_bytes <= 0:
            return []
        keys = [(p.stat().st_mtime, p.name, dir_bytes(p)) for p in self.root.iterdir()
                if p.is_dir() and p.name.startswith(PREFIX)]
        total = sum(size for *_, size in keys)
        removed = []
        for name, size in eviction_order(keys, keep, time.time()):
            if total <= max_bytes:
                break
            if not self._try_unpublish(name):
                continue
            total -= size
            removed.append(name)
        shutil.rmtree(self.root / ".trash", ignore_errors=True)
        (self.root / ".trash").mkdir(exist_ok=True)
        return removed

    def _try_unpublish(self, key: str) -> bool:
        fd = os.open(lock_file(self.root, key), os.O_RDWR | os.O_CREAT, 0o664)
        try:
            if not try_flock(fd, fcntl.LOCK_EX):
                return False  # a fetcher of that key is at work, or a server reads it: not evicted now
            try:
                os.rename(self.published(key), self.root / ".trash" / f"{key}.{uuid.uuid4().hex}")
            except FileNotFoundError:
                return False  # another pod's eviction took it since the listing
            return True
        finally:
            os.close(fd)


def link(model_dir: Path, target: Path) -> None:
    """Point the server's model directory at the published key (a symlink, replaced atomically)."""
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = model_dir.parent / f".{model_dir.name}.{uuid.uuid4().hex}"
    os.symlink(target, tmp)
    os.replace(tmp, model_dir)
