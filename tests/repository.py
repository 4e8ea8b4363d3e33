"""The repository's own files, as git sees them: what the checks over the whole tree read."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def files(*pathspecs: str) -> list[Path]:
    """The files git tracks, and new ones it does not ignore (a change not yet committed is checked
    too), optionally only those matching `pathspecs` (git's, e.g. "*.py")."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *pathspecs],
                            cwd=ROOT, capture_output=True, text=True, check=True, timeout=60).stdout
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]
