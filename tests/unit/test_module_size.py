"""Small modules with one job each: no Python module of the repository over 500 lines.

The repository holds no generated Python (hack/generate.py writes YAML and Markdown), so the bound
holds for every tracked `.py` file, tests included. A module past it is split by what its parts
hold, as localcluster/cluster.py gave its command lines to localcluster/controlplane.py.
"""

from __future__ import annotations

from tests.repository import ROOT, files

MAX_LINES = 500


def test_the_repository_has_python_modules_to_measure():
    python = files("*.py")
    assert len(python) > 100 and ROOT / "localcluster" / "cluster.py" in python


def test_no_python_module_is_over_500_lines():
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in files("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
