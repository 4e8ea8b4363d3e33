"""Figures written as they are measured (bench/server_bench.py, bench/slots_check.py).

A run on a lent GPU machine can be cut at its deadline; what comes back is what is on disk. So
each figure is written as soon as it exists, the whole file replaced at once (a reader never sees
half a file), and a cut run leaves every figure it measured.
"""

from __future__ import annotations

import json
from pathlib import Path


def write_figures(path: str | Path | None, figures: dict) -> None:
    """`figures` to `path` (nothing when no path is given), replacing the file whole."""
    if path:
        tmp = Path(path).with_suffix(".part")
        tmp.write_text(json.dumps(figures, indent=2))
        tmp.replace(path)
