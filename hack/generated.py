"""What every generator in hack/ does with its output: check it, or write it only when it changed.

The generators (gen-crd.py, gen-limits-table.py, gen-crd-reference.py) render a file, or a
marked part of one, from its source; `--check` reports a stale copy (exit 1) instead of writing.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def refresh(path: Path, want: str, *, check: bool, what: str, command: str) -> int:
    """Bring `path` to `want` (or, with `check`, only say whether it is); the exit code."""
    where = f"{path.relative_to(ROOT)}: {what}"
    stale = path.read_text() != want
    if check:
        print(f"{where} is stale: run {command}" if stale else f"{where} is up to date")
        return 1 if stale else 0
    if stale:
        path.write_text(want)
        print(f"{where} written")
    return 0
