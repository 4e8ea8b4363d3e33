"""A directory laid out and updated the way kubelet writes a mounted Secret volume, and test certificates.

Kubelet's AtomicWriter puts the files in a fresh timestamped directory `..<ts>`, points a new
`..data_tmp` symlink at it, renames that over `..data` (the atomic step), and keeps one symlink
per key `<key> -> ..data/<key>`; the old directory is removed afterwards. A reader that opens
`<dir>/<key>` sees the old file or the new one, never a mix; its path never changes.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from localcluster import pki


def write_secret_volume(root: Path, files: dict[str, bytes]) -> None:
    """Create or update `root` with `files` in one atomic swap, as kubelet does."""
    root.mkdir(parents=True, exist_ok=True)
    data = root / "..data"
    old = os.readlink(data) if data.is_symlink() else None
    stamp = root / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    stamp.mkdir()
    for key, content in files.items():
        (stamp / key).write_bytes(content)
    tmp = root / "..data_tmp"
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(stamp.name)
    os.rename(tmp, data)
    for key in files:
        link = root / key
        if not link.is_symlink():
            link.symlink_to(Path("..data") / key)
    if old:
        shutil.rmtree(root / old, ignore_errors=True)


def self_signed(workdir: Path, name: str, serial: int, *, san: str = "IP:127.0.0.1") -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) of a fresh self-signed certificate with this serial number."""
    cert, key = pki.self_signed(workdir, name, san=san, days=1, serial=serial)
    return cert.read_bytes(), key.read_bytes()
