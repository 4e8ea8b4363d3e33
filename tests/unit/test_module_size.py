"""Small modules with one job each: no Python module of the repository over 500 lines.

The repository holds no generated Python (hack/generate.py writes YAML and Markdown), so the bound
holds for every tracked `.py` file, tests included. A module past it is split by what its parts
hold, as localcluster/cluster.py gave its command lines to localcluster/controlplane.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 500


def tracked_python_files() -> list[Path]:
    out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                          "*.py"], check=True, capture_output=True, text=True).stdout
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def test_the_repository_has_python_modules_to_measure():
    files = tracked_python_files()
    assert len(files) > 100 and ROOT / "localcluster" / "cluster.py" in files


def test_no_python_module_is_over_500_lines():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in tracked_python_files()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
