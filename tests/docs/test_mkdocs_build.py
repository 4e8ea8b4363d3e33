"""The documentation site builds with `mkdocs build --strict`: a broken link, a missing anchor or a
page left out of the navigation fails it (mkdocs.yml's `validation`), so it fails here. Repository
files shown inline (pymdownx.snippets) are the files as they are in the checkout."""

import html

import os
import re
import subprocess
import sys

from tests.docs.pages import ROOT


def test_mkdocs_build_strict_passes(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        raise AssertionError("mkdocs is not installed: `make venv` installs it from requirements-dev.txt") from None
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "operations" / "runbooks" / "index.html").is_file()
    for page, example in [("concepts/batch", "examples/batch.yaml"), ("concepts/quality-gate", "examples/quality-gate.yaml")]:
        shown = html.unescape(re.sub(r"<[^>]+>", "", (tmp_path / "site" / page / "index.html").read_text()))
        for line in (ROOT / example).read_text().splitlines():
            assert line.strip() in shown, (page, line)
