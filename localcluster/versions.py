"""The harness's version pins (versions.env), for Python: the tests that check what was built."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

VERSIONS_FILE = Path(__file__).with_name("versions.env")


def pins(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """NAME -> version, as the build scripts read them (comments and blank lines skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() and not name.lstrip().startswith("#"):
            out[name.strip()] = value.strip()
    return out


K8S_VERSION = pins()["K8S_VERSION"]


def cache_root() -> Path:
    """Where the harness caches what it builds (binaries, images, the node's image store)."""
    return Path(os.environ.get("CAUSALFLOW_CACHE", Path.home() / ".cache" / "causalflow-ocr"))


def built_dir(script: Path, build: bool = True) -> Path:
    """The cache dir a build script (`build-*.sh`) fills, running it first when `build` (minutes,
    once: it returns at once when its versioned dir is complete)."""
    if build:
        subprocess.run(["bash", str(script)], check=True)
    out = subprocess.run(["bash", str(script), "--print-dir"], check=True, capture_output=True, text=True).stdout
    return Path(out.strip())
