"""server/requirements-cuda.lock: the CUDA libraries of server/requirements.lock, for their own image layer.

Why: PyPI's Linux torch brings CUDA's libraries as wheels (nvidia-cublas, nvidia-cudnn-cu13, ...,
cuda-toolkit): 3 GB of the server image's 6.5 GB dependency layer, and they change only with the
CUDA that torch is built for. Dockerfile.server installs them first, from this file alone, so that

- a lock change that leaves them (transformers, fastapi, even torch within one CUDA) rebuilds and
  ships only the other layer: a node that runs the older image pulls half as much;
- building the dependencies needs less free disk: pip's install, buildah's diff and the committed
  layer hold 3 or 3.5 GB at a time, not all 6.5 GB at once (measured: 16.8 GB at the peak, against
  22.9 GB as one layer).

The CUDA libraries are the entries named ``nvidia-*`` or ``cuda-*`` that the server does not ask for
itself (``nvidia-ml-py``, NVML's bindings in its ``gpu`` extra, is the server's and stays with it),
copied with their hashes and annotations. ``make lock`` writes the file; ``--check`` exits 1 when it
is not what the server lock gives (tests/unit/test_locks.py runs the same comparison).

    python hack/cuda_lock.py [--check]
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SERVER_LOCK = ROOT / "server" / "requirements.lock"
CUDA_LOCK = ROOT / "server" / "requirements-cuda.lock"
SERVER_PROJECT = ROOT / "server" / "pyproject.toml"
CUDA_PREFIXES = ("nvidia-", "cuda-")
HEADER = ("# The CUDA libraries of server/requirements.lock (hack/cuda_lock.py, run by `make lock`):\n"
          "# Dockerfile.server installs them in a layer of their own, before the rest of that lock.\n")


def _name(requirement: str) -> str:
    """A requirement's (or a lock entry's, its line continuation dropped) normalised name."""
    return canonicalize_name(Requirement(requirement.removesuffix("\\").strip()).name)


def own_names(project: Path = SERVER_PROJECT) -> set[str]:
    """What the server's pyproject.toml asks for, its extras included, by normalised name."""
    spec = tomllib.loads(project.read_text())["project"]
    wanted = spec.get("dependencies", []) + [d for ds in spec.get("optional-dependencies", {}).values() for d in ds]
    return {_name(d) for d in wanted}


def is_cuda_library(name: str, own: set[str]) -> bool:
    return name.startswith(CUDA_PREFIXES) and name not in own


def cuda_entries(lock_text: str, own: set[str]) -> str:
    """The lock's CUDA-library entries, each with the indented lines (hashes, `# via`) under it (pure)."""
    kept: list[str] = []
    keep = False
    for line in lock_text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):  # an entry begins
            keep = is_cuda_library(_name(line), own)
        elif not line or not line[0].isspace():  # a comment or a blank between entries
            keep = False
            continue
        if keep:
            kept.append(line)
    return HEADER + "".join(line + "\n" for line in kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is not up to date")
    args = parser.parse_args(argv)
    want = cuda_entries(SERVER_LOCK.read_text(), own_names())
    if args.check:
        if not CUDA_LOCK.is_file() or CUDA_LOCK.read_text() != want:
            print(f"{CUDA_LOCK} is not the CUDA part of {SERVER_LOCK}: run `make lock`", file=sys.stderr)
            return 1
        return 0
    CUDA_LOCK.write_text(want)
    return 0


if __name__ == "__main__":
    sys.exit(main())
