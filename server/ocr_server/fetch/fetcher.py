"""One fetch: the list, the cache key, the downloads and their verification, the publish.

Bounded: the listing by FETCH_MAX_OBJECTS and FETCH_MAX_TOTAL_BYTES, the whole run by
FETCH_TIMEOUT_SECONDS (waiting for another pod's fetch of the same key included), and the transfer
by FETCH_STALL_SECONDS without a byte, after which a store that hangs is an outage. An S3 outage (no
answer, a 5xx, throttling, no byte) is waited out within FETCH_MAX_OUTAGE_SECONDS (waiting.py): a
listing or a read is tried again, a part of a file cut off mid-way goes on from its next byte (the
files verified so far stay, and a restarted fetch skips them too); every other failure of the
store ends the fetch at once. With spec.model.checksums the key is known before any request, so a
cache hit (a scale-up on a node that has the weights) asks the store nothing.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_any
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..runtime.checksums import FILE_NAME, SKIP, SKIP_DIRS, sha256_file
from . import CHECKSUM_MISMATCH, FETCH_FAILED, FetchError
from .cache import Cache, key_of, link, normalize
from .report import Reporter
from .settings import Settings
from .store import Bucket, StoreOutage, explain
from .waiting import StoreWait

POLL_SECONDS = 0.2
PARTIAL = ".partial"  # a file being fetched, beside its final name (a restarted fetch removes it)


@dataclass
class Part:
    """One ranged GET of a file: bytes next..last (inclusive). `next` moves as bytes are written, so
    a part cut off by an outage starts again where it stopped."""

    name: str
    next: int
    last: int
    due: float = 0.0  # when a part waiting out an outage is tried again
    tries: int = 0  # its failed tries in the current outage


def plan(files: Mapping[str, int], names: list[str], chunk: int) -> list[Part]:
    """The parts of `names` (an empty file has none), each at most `chunk` bytes."""
    return [Part(name, first, min(first + chunk, files[name]) - 1)
            for name in names for first in range(0, files[name], chunk)]


def read_list(data: bytes | str, where: str) -> dict[str, str]:
    try:
        parsed = json.loads(data)
    except ValueError as exc:
        raise FetchError(CHECKSUM_MISMATCH, f"{where} is not valid JSON: {exc}") from None
    if (not isinstance(parsed, dict) or not parsed
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in parsed.items())):
        raise FetchError(CHECKSUM_MISMATCH, f"{where} must map file paths to sha256 hex digests")
    return normalize(parsed)


def given_list(settings: Settings) -> dict[str, str] | None:
    """spec.model.checksums as the operator rendered it; None when the OcrService has none."""
    path = settings.checksums_file
    if path is None or not path.is_file():
        return None
    return read_list(path.read_text(), f"{path} (spec.model.checksums)")


def weight_files(objects: Mapping[str, int]) -> dict[str, int]:
    """The objects that are weights: all but the checksum list and what tools leave behind (the
    files `python -m ocr_server.checksums` leaves out). A key that leaves the directory is refused."""
    out = {}
    for name, size in objects.items():
        parts = name.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise FetchError(FETCH_FAILED, f"object {name!r}: not a relative file path")
        if parts[-1] in SKIP or any(p in SKIP_DIRS for p in parts[:-1]):
            continue
        out[name] = size
    return out


def check_cover(files: Mapping[str, int], expected: Mapping[str, str], url: str, source: str) -> None:
    """Every file is verified: each object has a digest in the list, each listed file is an object."""
    unlisted = sorted(set(files) - set(expected))
    if unlisted:
        raise FetchError(CHECKSUM_MISMATCH, f"{url}{unlisted[0]} has no sha256 in {source}: every file is verified, "
                                            f"so the list must name it ({len(unlisted)} unlisted)")
    missing = sorted(set(expected) - set(files))
    if missing:
        raise FetchError(CHECKSUM_MISMATCH, f"{missing[0]} is listed in {source} but is not under {url}")


class Fetch:
    def __init__(self, settings: Settings, reporter: Reporter) -> None:
        self.s = settings
        self.report = reporter
        self.deadline = time.monotonic() + settings.timeout_seconds
        self.cache = Cache(settings.cache_dir)
        self.bucket: Bucket | None = None
        self.wait = StoreWait(settings.max_outage_seconds, reporter, lambda: self._bounds(False))

    def run(self) -> Path:
        """The published model directory (linked from settings.link); FetchError on failure."""
        expected = given_list(self.s)
        source = "spec.model.checksums"
        if expected is not None:
            key = key_of(expected)
            with self.cache.lock(key, self.deadline, self._waiting):
                if self.cache.hit(key):
                    return self._finish(key, "hit")
        self.bucket = Bucket(self.s)
        bucket = self.bucket
        objects = self.wait.call(bucket.list)
        if expected is None:
            if FILE_NAME not in objects:
                raise FetchError(CHECKSUM_MISMATCH, f"no checksum list: the OcrService sets no spec.model.checksums "
                                                    f"and {self.s.url}{FILE_NAME} does not exist (one is required)")
            expected = read_list(self.wait.call(lambda: bucket.read_small(FILE_NAME)), f"{self.s.url}{FILE_NAME}")
            source = f"{self.s.url}{FILE_NAME}"
        files = weight_files(objects)
        check_cover(files, expected, self.s.url, source)
        key = key_of(expected)
        with self.cache.lock(key, self.deadline, self._waiting):
            if self.cache.hit(key):
                return self._finish(key, "hit")
            self._download(key, files, expected, source)
            self.cache.publish(key, expected, FILE_NAME)
        evicted = self.cache.evict(key, self.s.cache_max_bytes)
        return self._finish(key, "miss", evicted=evicted)

    def _waiting(self) -> None:
        self.report.emit("waiting", message="another pod of this node is fetching the same weights")

    def _finish(self, key: str, cache: str, **fields) -> Path:
        path = self.cache.published(key)
        if self.s.link is not None:
            link(self.s.link, path)
        self.report.done(cache=cache, key=key, path=str(path), **fields)
        return path

    def _download(self, key: str, files: Mapping[str, int], expected: Mapping[str, str], source: str) -> None:
        assert self.bucket is not None
        journal = self.cache.prepare(key, files)
        stage = self.cache.staging(key)
        todo = sorted(n for n in files if n not in journal)
        self.report.start(sum(files.values()), len(files), sum(files[n] for n in journal), len(journal))
        if journal:
            self.report.emit("resumed", verified_files=len(journal))
        partial = {}
        try:
            for name in todo:
                (stage / name).parent.mkdir(parents=True, exist_ok=True)
                partial[name] = open(f"{stage / name}{PARTIAL}", "wb", buffering=0)
                partial[name].truncate(files[name])
            self._transfer(key, stage, plan(files, todo, self.s.chunk_bytes), partial, journal, expected, source)
        except FetchError:
            self.bucket.close(cancel=True)
            raise
        finally:
            for f in partial.values():
                f.close()
        self.bucket.close()

    def _fetch(self, f, part: Part) -> None:
        """One part's ranged GET (a transfer thread), from its next byte; each piece is written
        and counted as it comes, so a GET cut off by an outage is tried again from where it stopped."""
        def write(piece: bytes) -> None:
            view = memoryview(piece)
            while view:
                n = os.pwrite(f.fileno(), view, part.next)
                part.next += n
                view = view[n:]
            self.report.add_bytes(len(piece))
        assert self.bucket is not None
        self.bucket.read_range(part.name, part.next, part.last, write)

    def _transfer(self, key: str, stage: Path, parts: list[Part], partial: dict, journal: dict,
                  expected: Mapping[str, str], source: str) -> None:
        assert self.bucket is not None
        left = {name: 0 for name in partial}  # each file's parts not fetched yet
        for part in parts:
            left[part.name] += 1
        pending = deque(parts)  # not started yet: at most FETCH_CONCURRENCY run, none while the store is down
        running: dict[Future, Part] = {}
        waiting: list[Part] = []  # parts waiting out an outage
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as hasher:
            hashing = {}
            while left or running or waiting or hashing:
                for future, part in list(running.items()):
                    if future.done():
                        del running[future]
                        try:
                            future.result()
                        except FetchError:
                            raise
                        except Exception as exc:  # noqa: BLE001 - boto3's errors
                            err = explain(exc, f"{self.s.url}{part.name}", self.bucket.endpoint)
                            if not isinstance(err, StoreOutage):
                                raise err from None
                            part.due = time.monotonic() + self.wait.failed(err, part.tries)
                            part.tries += 1
                            waiting.append(part)
                            continue
                        self.wait.ok()
                        left[part.name] -= 1
                for name in [n for n, count in left.items() if count == 0]:
                    del left[name]
                    partial.pop(name).close()
                    os.replace(f"{stage / name}{PARTIAL}", stage / name)
                    hashing[name] = hasher.submit(sha256_file, stage / name)
                if self.wait.down and self.report.last_bytes_at > (self.wait.outage.since or 0.0):
                    self.wait.ok()  # bytes came since the outage began: the store answers again
                for part in list(waiting):
                    if part.due <= time.monotonic() or not self.wait.down:  # due, or the store is back
                        waiting.remove(part)
                        part.tries = part.tries if self.wait.down else 0
                        running[self.bucket.submit(self._fetch, partial[part.name], part)] = part
                        self.report.restarted()  # the stall bound counts from this start
                while pending and not self.wait.down and len(running) + len(waiting) < self.s.concurrency:
                    part = pending.popleft()
                    running[self.bucket.submit(self._fetch, partial[part.name], part)] = part
                for name, future in list(hashing.items()):
                    if future.done():
                        del hashing[name]
                        self._verified(key, journal, name, future.result(), expected[name], source)
                self._bounds(bool(running))
                if running or hashing:  # back as soon as a part or a hash is done: the next part starts
                    wait_any([*running, *hashing.values()], timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
                else:
                    time.sleep(POLL_SECONDS)

    def _verified(self, key: str, journal: dict, name: str, actual: str, want: str, source: str) -> None:
        if actual != want:
            (self.cache.staging(key) / name).unlink(missing_ok=True)  # fetched again next time
            raise FetchError(CHECKSUM_MISMATCH, f"{name} from {self.s.url}{name} has sha256 {actual}, "
                                                f"{source} expects {want}")
        self.cache.record(key, journal, name, actual)
        self.report.file_done(name)

    def _bounds(self, transferring: bool) -> None:
        if transferring and not self.wait.down and self.report.stalled_for() > self.s.stall_seconds:
            # A store that hangs: an outage from now (its requests fail at their read timeout, or
            # bytes come again); with no outage budget, the fetch fails here.
            assert self.bucket is not None
            self.wait.failed(StoreOutage(f"the download from {self.s.url} stalled: no byte for "
                                         f"{self.s.stall_seconds:.0f}s (FETCH_STALL_SECONDS)",
                                         f"no byte from {self.bucket.endpoint} for {self.s.stall_seconds:.0f}s"), 0)
        self.wait.spent()
        if time.monotonic() > self.deadline:
            raise FetchError(FETCH_FAILED, f"the fetch from {self.s.url} took longer than "
                                           f"{self.s.timeout_seconds:.0f}s (FETCH_TIMEOUT_SECONDS)")
