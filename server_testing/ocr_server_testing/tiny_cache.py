"""Tiny models written once per version of their generator and kept under ~/.cache/causalflow-ocr.

Writing a tiny model (tiny_model.py) costs about 15 s of CPU in a fresh process, most of it
importing torch and transformers; the suite asks for the same few variants (layout, seed, for-vllm,
loop) in many places. `cached(...)` returns the variant's folder in the cache, written on first use
by the generator in a process of its own (the caller imports neither torch nor transformers), and
named by the hash of the code that writes it, so a change of that code writes it anew and the old
versions are removed. `copy_to(dest, ...)` copies it where a test may change it. A lock keeps
two processes (test workers, the e2e tier) from writing one at a time.

Read-only use is `cached(...)` itself; anything that writes, chmods or corrupts files takes a copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

DONE = "README.md"  # the generator writes it last: a folder without it is not complete


def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "causalflow-ocr" / "tiny-models"


def generator_hash() -> str:
    """The hash of what writes a tiny model: the generator, the official layout's key map, the
    checkpoint conversion and the server's tiny marker (read as files: nothing is imported), and
    the torch and transformers that run them."""
    here = Path(__file__).resolve().parent
    server = Path(importlib.util.find_spec("ocr_server").origin).parent
    sources = (here / "tiny_model.py", here / "official_layout.py", server / "engines" / "tiny_marker.py",
               server / "engines" / "transformers" / "convert.py")
    versions = " ".join(importlib.metadata.version(d) for d in ("torch", "transformers")).encode()
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources) + versions).hexdigest()[:16]


def variant(layout: str = "native", seed: int = 0, for_vllm: bool = False, loop: bool = False) -> str:
    """The folder name of one variant (the generator's arguments)."""
    if layout not in ("native", "official"):
        raise ValueError(f"layout must be 'native' or 'official', got {layout!r}")
    return "-".join(["for-vllm" if for_vllm else layout, f"seed{seed}"] + (["loop"] if loop else []))


def _args(layout: str, seed: int, for_vllm: bool, loop: bool) -> list[str]:
    return (["--layout", layout, "--seed", str(seed)] + (["--for-vllm"] if for_vllm else [])
            + (["--loop"] if loop else []))


def cached(layout: str = "native", seed: int = 0, for_vllm: bool = False, loop: bool = False) -> Path:
    """The variant's folder in the cache, written first if it is not there (read-only use)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    version = generator_hash()
    final = root / version / variant(layout, seed, for_vllm, loop)
    if (final / DONE).is_file():
        return final
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (final / DONE).is_file():
            partial = final.with_name(final.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            r = subprocess.run([sys.executable, "-m", "ocr_server_testing.tiny_model", str(partial),
                                *_args(layout, seed, for_vllm, loop)], capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"writing the tiny model {final.name} failed:\n{(r.stdout + r.stderr)[-3000:]}")
            partial.rename(final)
            for old in [*root.iterdir(), *root.parent.glob("tiny-vllm-*")]:  # (tiny-vllm-*: this cache's predecessor)
                if old.is_dir() and old.name != version:
                    shutil.rmtree(old, ignore_errors=True)
    return final


def copy_to(dest: str | Path, layout: str = "native", seed: int = 0, for_vllm: bool = False,
            loop: bool = False) -> Path:
    """A copy of the variant at `dest` (created; files already there are replaced), for a caller
    that may change it."""
    out = Path(dest)
    shutil.copytree(cached(layout, seed, for_vllm, loop), out, dirs_exist_ok=True)
    return out
