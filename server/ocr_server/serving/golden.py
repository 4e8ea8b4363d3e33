"""The quality gate's golden pages on the model volume: a read-only, bounded view of GOLDEN_DIR.

The operator never mounts a PVC. With spec.rollout.qualityGate.goldenPages.pvcPath it sets
GOLDEN_DIR in the pods it renders (the path inside the mounted model volume) and reads the pages
through this server: GET /v1/golden lists them (name, size, sha256, the optional `<page>.txt`
expected text) and GET /v1/golden/{name} returns one page's bytes. It then sends them to /v1/ocr
as it sends a ConfigMap's pages.

Only regular files directly in GOLDEN_DIR are read, each opened without following a symbolic
link; a symbolic link, a device or a folder that passes through one is refused, sub-folders and
hidden files are skipped. Bounds are the ConfigMap variant's (ocr_limits.quality): pages, bytes in
all, characters of an expected text, and the entries read. Errors are JSON: 404
golden_pages_missing (GOLDEN_DIR unset, or no such folder), 413 golden_pages_too_large, 422
golden_pages_invalid, 404 not_found (no such page). The routes are http/golden_routes.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field

from ocr_limits.quality import (
    GOLDEN_DIR_ENV,
    GOLDEN_NAME_PATTERN,
    MAX_GOLDEN_BYTES,
    MAX_GOLDEN_ENTRIES,
    MAX_GOLDEN_PAGES,
    MAX_PAGE_TEXT_CHARS,
)

from ..runtime.errors import GoldenInvalid, GoldenMissing, GoldenTooLarge

ENV = GOLDEN_DIR_ENV
EXPECTED_SUFFIX = ".txt"
NAME = re.compile(GOLDEN_NAME_PATTERN)
# An expected text is read up to this many bytes (UTF-8 takes at most 4 per character).
MAX_TEXT_BYTES = 4 * MAX_PAGE_TEXT_CHARS


@dataclass(frozen=True)
class Golden:
    name: str
    data: bytes = field(repr=False)
    expected: str | None

    def to_json(self) -> dict:
        return {"name": self.name, "size": len(self.data), "sha256": hashlib.sha256(self.data).hexdigest(),
                "expected": self.expected}


def _read(dir_fd: int, name: str, limit: int) -> bytes:
    """A regular file of the folder, opened without following a symbolic link; at most `limit`
    bytes (one more tells that it is larger)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        raise GoldenInvalid(f"{name}: cannot be opened as a regular file ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GoldenInvalid(f"{name}: not a regular file")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_golden(root: str | None) -> list[Golden]:
    """The golden pages in `root`, sorted by name, or the OcrError that says what is wrong."""
    if not root:
        raise GoldenMissing(f"{ENV} is not set: this server has no golden pages")
    if not os.path.isabs(root) or os.path.realpath(root) != os.path.normpath(root):
        raise GoldenInvalid(f"{ENV} {root} is not an absolute path free of symbolic links")
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        raise GoldenMissing(f"{ENV} {root}: no such folder on the model volume") from None
    try:
        files: dict[str, int] = {}
        with os.scandir(dir_fd) as entries:
            for n, entry in enumerate(entries):
                if n >= MAX_GOLDEN_ENTRIES:
                    raise GoldenTooLarge(f"{root} holds more than {MAX_GOLDEN_ENTRIES} entries")
                if entry.name.startswith("."):
                    continue
                if entry.is_symlink():
                    raise GoldenInvalid(f"{entry.name} is a symbolic link: golden pages are regular files")
                if entry.is_dir(follow_symlinks=False):
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise GoldenInvalid(f"{entry.name}: not a regular file")
                if not NAME.match(entry.name):
                    raise GoldenInvalid(f"{entry.name!r}: a page's name is letters, digits, '.', '_' and '-', "
                                        f"at most 253 characters")
                files[entry.name] = entry.stat(follow_symlinks=False).st_size
        pages = sorted(n for n in files if not n.endswith(EXPECTED_SUFFIX))
        strays = sorted(n for n in files if n.endswith(EXPECTED_SUFFIX) and n[:-len(EXPECTED_SUFFIX)] not in files)
        if strays:
            raise GoldenInvalid(f"{strays[0]} names no page (an expected text is <page>{EXPECTED_SUFFIX})")
        if not pages:
            raise GoldenInvalid(f"{root} holds no page")
        if len(pages) > MAX_GOLDEN_PAGES:
            raise GoldenTooLarge(f"{root} holds {len(pages)} pages, more than {MAX_GOLDEN_PAGES}")
        if sum(files[n] for n in pages) > MAX_GOLDEN_BYTES:
            raise GoldenTooLarge(f"{root} holds more than {MAX_GOLDEN_BYTES} bytes of pages")
        out, total = [], 0
        for name in pages:
            data = _read(dir_fd, name, MAX_GOLDEN_BYTES - total)
            total += len(data)
            if total > MAX_GOLDEN_BYTES:  # grew since it was listed
                raise GoldenTooLarge(f"{root} holds more than {MAX_GOLDEN_BYTES} bytes of pages")
            if not data:
                raise GoldenInvalid(f"{name} is empty")
            expected = None
            if name + EXPECTED_SUFFIX in files:
                raw = _read(dir_fd, name + EXPECTED_SUFFIX, MAX_TEXT_BYTES)
                try:
                    expected = raw[:MAX_TEXT_BYTES].decode("utf-8")
                except UnicodeDecodeError:
                    expected = None
                if len(raw) > MAX_TEXT_BYTES or (expected and len(expected) > MAX_PAGE_TEXT_CHARS):
                    raise GoldenTooLarge(f"{name}{EXPECTED_SUFFIX} is longer than {MAX_PAGE_TEXT_CHARS} characters")
                if expected is None:
                    raise GoldenInvalid(f"{name}{EXPECTED_SUFFIX} is not UTF-8 text")
            out.append(Golden(name, data, expected))
        return out
    finally:
        os.close(dir_fd)
