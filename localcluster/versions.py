"""The harness's version pins (versions.env), for Python: the tests that check what was built."""

from __future__ import annotations

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
