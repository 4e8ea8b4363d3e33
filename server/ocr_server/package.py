"""`python -m ocr_server.package DIR --tag REF`: a weights directory as an OCI image for spec.model.source.image.

The image holds the directory's files at its root and their sha256 list as `model-checksums.json`
(runtime/checksums.py's shape), nothing else: no base, no shell, no entry point. Kubernetes mounts
it read-only as an image volume at the model directory, where the server finds the list beside
the weights and verifies every file before it loads them. Built with buildah (`buildah from
scratch`, `copy`, `commit`) into buildah's local storage; push it to a registry with `buildah
push` and pin the digest it reports in spec.model.source.image.reference (docs/concepts/model-weights.md).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .runtime.checksums import FILE_NAME, compute, model_files

LABEL = "dev.causalflow.ocr.model-checksums"  # sha256 of the list inside the image


class PackageError(RuntimeError):
    """The directory cannot become a weights image; the message names the file or the step."""


def unreadable(model_dir: Path) -> list[str]:
    """Paths the server (another user than the owner) could not read once in the image."""
    out = []
    for root, dirs, files in os.walk(model_dir):
        for name in dirs:
            if stat.S_IMODE((Path(root) / name).stat().st_mode) & 0o005 != 0o005:
                out.append(str((Path(root) / name).relative_to(model_dir)) + "/")
        for name in files:
            if stat.S_IMODE((Path(root) / name).stat().st_mode) & 0o004 == 0:
                out.append(str((Path(root) / name).relative_to(model_dir)))
    return sorted(out)


def checksum_list(model_dir: Path) -> bytes:
    """The directory's model-checksums.json: sha256 of every weight file, canonical JSON."""
    if not (model_dir / "config.json").is_file():
        raise PackageError(f"{model_dir} is not a model directory: config.json is missing")
    bad = unreadable(model_dir)
    if bad:
        raise PackageError(f"{bad[0]} in {model_dir} is not readable by others (chmod a+rX): the server runs as "
                           f"another user ({len(bad)} path(s))")
    sums = compute(model_dir, model_files(model_dir))
    return json.dumps(sums, sort_keys=True, indent=1).encode() + b"\n"


def build(model_dir: Path, tag: str, buildah: list[str]) -> str:
    """Commit the image `tag`; returns its image ID."""
    listing = checksum_list(model_dir)

    def run(*args: str) -> str:
        r = subprocess.run([*buildah, *args], capture_output=True, text=True)
        if r.returncode:
            raise PackageError(f"buildah {args[0]} failed (rc {r.returncode}): {r.stderr.strip()[-2000:]}")
        return r.stdout.strip()

    ctr = run("from", "scratch")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sums = Path(tmp) / FILE_NAME
            sums.write_bytes(listing)
            sums.chmod(0o644)
            run("copy", "--chown", "0:0", ctr, f"{model_dir}/.", "/")
            run("copy", "--chown", "0:0", ctr, str(sums), f"/{FILE_NAME}")
        run("config", "--label", f"{LABEL}=sha256:{hashlib.sha256(listing).hexdigest()}", ctr)
        # Every timestamp at the epoch (the config's and the layer's files'): the same weights give
        # the same digest, so packaging them again is no new revision of an OcrService.
        return run("commit", "--rm", "--quiet", "--timestamp", "0", ctr, tag)
    except BaseException:
        subprocess.run([*buildah, "rm", ctr], capture_output=True)
        raise


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ocr_server.package",
                                description="a weights directory as an OCI image for spec.model.source.image")
    p.add_argument("model_dir", type=Path)
    p.add_argument("--tag", required=True, help="the image's name, e.g. registry.example.com/models/ocr:v1")
    p.add_argument("--buildah", default="buildah",
                   help="the buildah command line, with its global options (e.g. 'buildah --root DIR')")
    args = p.parse_args(argv)
    t0 = time.monotonic()
    try:
        image_id = build(args.model_dir, args.tag, args.buildah.split())
    except PackageError as exc:
        print(f"ocr_server.package: {exc}", file=sys.stderr)
        return 1
    print(image_id)
    print(f"{args.tag}: {image_id} in {time.monotonic() - t0:.1f}s; `buildah push --digestfile F {args.tag} "
          f"docker://REGISTRY/NAME:TAG` then set spec.model.source.image.reference to NAME:TAG@$(cat F)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
