"""Weights verified by sha256 before the model loads (the OcrService's spec.model.checksums).

The operator writes the expected digests into its ConfigMap as ``model-checksums.json`` beside
``config.yaml``; the server checks every listed file before it loads anything and exits with a
message naming the first file that is missing or differs, so the pod fails its startup and the
operator's rollback takes over. Files are hashed in parallel threads (hashlib releases the GIL
on large reads), so the cost is disk-bound: docs/development/benchmarks.md ("Model checksums") has a measured figure.

``python -m ocr_server.checksums DIR`` writes the list for a model directory, in the shape
``spec.model.checksums`` takes (``--json`` for the ConfigMap file's shape).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Mapping

FILE_NAME = "model-checksums.json"
CHUNK = 8 << 20
# Files worth verifying: everything but what tools leave behind.
SKIP = {".gitattributes", FILE_NAME}
SKIP_DIRS = {".git", ".cache", "__pycache__"}


class ChecksumError(RuntimeError):
    """A weight file is missing or its sha256 differs; the message names the file."""


def sha256_file(path: Path, chunk: int = CHUNK) -> str:
    digest = hashlib.sha256()
    with path.open("rb", buffering=0) as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def model_files(model_dir: Path) -> list[str]:
    """Relative paths of the files in `model_dir` worth a checksum, sorted."""
    out = []
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in files:
            if name not in SKIP:
                out.append(str((Path(root) / name).relative_to(model_dir)))
    return sorted(out)


def compute(model_dir: Path, names: list[str] | None = None, workers: int | None = None) -> dict[str, str]:
    names = model_files(model_dir) if names is None else names
    workers = workers or min(8, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        digests = pool.map(lambda n: sha256_file(model_dir / n), names)
        return dict(zip(names, digests))


def _safe(model_dir: Path, name: str) -> Path:
    path = (model_dir / name).resolve()
    if model_dir.resolve() not in path.parents:
        raise ChecksumError(f"model checksum for {name!r}: the path leaves the model directory {model_dir}")
    return path


def verify(model_dir: Path, expected: Mapping[str, str], workers: int | None = None) -> None:
    """Raise ChecksumError naming the first (sorted) missing or different file."""
    names = sorted(expected)
    for name in names:
        if not _safe(model_dir, name).is_file():
            raise ChecksumError(f"model checksum: {name} is missing from {model_dir}")
    actual = compute(model_dir, names, workers)
    for name in names:
        want = expected[name].strip().lower().removeprefix("sha256:")
        if actual[name] != want:
            raise ChecksumError(f"model checksum mismatch: {name} in {model_dir} has sha256 {actual[name]}, "
                                f"spec.model.checksums expects {want}")


def expected_for(config_file: str | None) -> dict[str, str]:
    """The list the operator wrote beside the config file; empty when there is none."""
    if not config_file:
        return {}
    path = Path(config_file).parent / FILE_NAME
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ChecksumError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ChecksumError(f"{path} must map file paths to sha256 hex digests")
    return data


def expected_in(model_dir: Path) -> dict[str, str]:
    """The list inside the model directory (a weights image from `python -m ocr_server.package`);
    empty when there is none. The operator's list, when given, wins."""
    path = Path(model_dir) / FILE_NAME
    return expected_for(str(path)) if path.is_file() else {}


def verify_configured(model_dir: Path, config_file: str | None, log=None, *, require: bool = False) -> int:
    """Verify what the operator asked for; returns the number of files checked.

    The list is the one beside CONFIG_FILE, else the one inside the model directory (a weights
    image's). No list verifies nothing: a warning, or with
    REQUIRE_CHECKSUMS=true a ChecksumError that stops start-up, so a lost ConfigMap key cannot
    quietly turn verification off."""
    log = log or logging.getLogger("ocr_server.checksums")
    expected = expected_for(config_file) or expected_in(model_dir)
    if not expected:
        where = str(Path(config_file).parent / FILE_NAME) if config_file else f"{FILE_NAME} (CONFIG_FILE is not set)"
        if require:
            raise ChecksumError(f"REQUIRE_CHECKSUMS=true but there is no checksum list: {where} is missing or empty; "
                                "set spec.model.checksums or REQUIRE_CHECKSUMS=false")
        log.warning("model checksums: %s is missing or empty; the weights in %s are not verified "
                    "(REQUIRE_CHECKSUMS=true makes this an error)", where, model_dir)
        return 0
    t0 = time.monotonic()
    verify(model_dir, expected)
    log.info("model checksums: %d file(s) verified in %.1fs", len(expected), time.monotonic() - t0)
    return len(expected)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocr_server.checksums",
                                description="sha256 of every file of a model directory, for spec.model.checksums")
    p.add_argument("model_dir", type=Path)
    p.add_argument("--json", action="store_true", help=f"print JSON (the {FILE_NAME} shape) instead of YAML")
    p.add_argument("--verify", action="store_true", help=f"check the directory against {FILE_NAME} in it or stdin")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    if args.verify:
        source = args.model_dir / FILE_NAME
        expected = json.loads(source.read_text() if source.is_file() else sys.stdin.read())
        try:
            verify(args.model_dir, expected)
        except ChecksumError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"{len(expected)} file(s) verified in {time.monotonic() - t0:.2f}s", file=sys.stderr)
        return 0
    sums = compute(args.model_dir)
    if args.json:
        print(json.dumps(sums, indent=2, sort_keys=True))
    else:
        print("checksums:")
        for name, digest in sums.items():
            print(f"  {json.dumps(name)}: {digest}")
    size = sum((args.model_dir / n).stat().st_size for n in sums)
    print(f"# {len(sums)} file(s), {size / 2**30:.2f} GiB in {time.monotonic() - t0:.2f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
