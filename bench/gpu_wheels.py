"""`bench/gpu_check.sh --prepare`: the wheels a GPU machine without a package index needs.

Runs here, where the package index is reachable. The GPU machine's python3 holds torch, an older
transformers and most of the libraries, but not the server's web stack (fastapi, uvicorn,
python-multipart), pypdfium2 or pydantic. pip downloads, for that machine's Python (3.12,
manylinux x86-64) and for any other Python named (the replica's, if it differs), the whole
dependency closure of the server (server/pyproject.toml, without torch) and of the bench's client
(httpx), at the versions this project's venv tests (its `pip freeze` as constraints). The largest
wheels that machine's image holds at versions the server accepts (numpy, pillow) are left out.
On the machine, pip itself decides which of these it needs (`gpu_run.py`'s install phase).

    python bench/gpu_wheels.py --wheels bench/.wheels [--python-version 3.11]
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_PYTHON = "3.12"  # the GPU machine's python3 (Python 3.12.3, a venv's interpreter)
# Every manylinux tag an x86-64 glibc 2.35 (and newer) machine installs: pip matches tags exactly.
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in range(35, 16, -1)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
# Held by the GPU machine's image at versions the server accepts, and large: not packed.
IMAGE_HAS = {"torch", "numpy", "pillow"}
EXTRA_ROOTS = ["httpx"]  # the bench's HTTP client (server_bench.py)
# Roots only the model-fetch init container imports (ocr_server.fetch: S3), never the server process
# the check runs; botocore alone is 16 MiB of the 64 MiB a device call may carry.
FETCH_ONLY = {"boto3"}
REQUIREMENTS = "requirements.txt"  # in the wheel folder: what the machine's pip resolves at run time
# Pauses before the second and third download. A set-up packs anew when the venv's freeze changes
# (a new requirements-dev.lock); a release still being published (its metadata served, some wheels
# not yet) made the resolution impossible for a few minutes once (huggingface_hub 2.5.0 and its new
# dependencies, 2026-12-07 14:38, before the venv was locked): waited out, within a bound.
DOWNLOAD_RETRY_PAUSES = (30.0, 90.0)


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.split(r"[\s\[<>=!~;]", requirement.strip(), maxsplit=1)[0])


def server_roots(pyproject: str) -> list[str]:
    """The server's runtime requirements, as written in its pyproject.toml."""
    return list(tomllib.loads(pyproject)["project"]["dependencies"])


def check_roots(pyproject: str) -> list[str]:
    """What the GPU check's server process needs: the server's requirements without torch (the
    machine's own) and without the fetcher's (FETCH_ONLY)."""
    return [r for r in server_roots(pyproject) if requirement_name(r) not in {"torch", *FETCH_ONLY}]


def pinned_roots(roots: list[str], versions: dict[str, str]) -> list[str]:
    """The roots the machine resolves: transformers pinned to the packed version (the machine has an
    older one that must not be kept), every other root as the server asks for it."""
    out = []
    for r in roots + EXTRA_ROOTS:
        name = requirement_name(r)
        out.append(f"transformers=={versions['transformers']}" if name == "transformers" else r)
    return out


def constraints(freeze: str) -> list[str]:
    """`name==version` lines of a pip freeze (editable and URL installs dropped)."""
    return [line.strip() for line in freeze.splitlines() if re.fullmatch(r"[A-Za-z0-9._-]+==\S+", line.strip())]


def versions_of(freeze_lines: list[str]) -> dict[str, str]:
    return {canonical(line.split("==")[0]): line.split("==")[1] for line in freeze_lines}


def wheel_name(filename: str) -> str:
    return canonical(filename.split("-")[0])


def download_command(python: str, pyver: str, dest: Path, roots: list[str], constraint_file: Path) -> list[str]:
    """pip resolving and downloading the closure of `roots` for CPython `pyver` on manylinux x86-64."""
    platform_args = [a for p in PLATFORMS for a in ("--platform", p)]
    return [python, "-m", "pip", "download", "-q", "--only-binary=:all:", "--implementation", "cp",
            "--python-version", pyver, *platform_args, "-d", str(dest), "-c", str(constraint_file), *roots]


def download(command: list[str], pauses: tuple[float, ...] = DOWNLOAD_RETRY_PAUSES,
             run=subprocess.run, sleep=time.sleep) -> None:
    """Run pip's download, again after each pause while it fails; the last failure is raised."""
    for pause in (*pauses, None):
        try:
            run(command, check=True)
            return
        except subprocess.CalledProcessError as exc:
            if pause is None:
                raise
            print(f"pip download failed (exit {exc.returncode}); trying again in {pause:g} s", file=sys.stderr)
            sleep(pause)


def prepare(wheels: Path, reference_python: str, python_versions: list[str]) -> list[Path]:
    """Fill `wheels` (emptied first: one version of each package) and write its requirements.txt."""
    freeze = subprocess.run([reference_python, "-m", "pip", "freeze", "--exclude-editable"], check=True,
                            capture_output=True, text=True).stdout
    pins = constraints(freeze)
    roots = check_roots((ROOT / "server" / "pyproject.toml").read_text())
    if wheels.exists():
        shutil.rmtree(wheels)
    wheels.mkdir(parents=True)
    constraint_file = wheels / "constraints.txt"
    constraint_file.write_text("\n".join(pins) + "\n")
    for pyver in dict.fromkeys(python_versions):
        download(download_command(reference_python, pyver, wheels, roots + EXTRA_ROOTS, constraint_file))
    for whl in wheels.glob("*.whl"):
        if wheel_name(whl.name) in IMAGE_HAS:
            whl.unlink()
    constraint_file.unlink()
    torch_floor = next(r for r in server_roots((ROOT / "server" / "pyproject.toml").read_text()) if requirement_name(r) == "torch")
    (wheels / REQUIREMENTS).write_text("\n".join([torch_floor, *pinned_roots(roots, versions_of(pins))]) + "\n")
    return sorted(wheels.glob("*.whl"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", type=Path, default=ROOT / "bench" / ".wheels")
    p.add_argument("--reference-python", default=str(ROOT / ".venv" / "bin" / "python"),
                   help="the venv whose package versions are packed (this project's)")
    p.add_argument("--python-version", action="append", default=[],
                   help="also pack compiled wheels for this Python (e.g. the replica's); 3.12 always")
    args = p.parse_args()
    got = prepare(args.wheels, args.reference_python, [GPU_PYTHON, *args.python_version])
    size = sum(w.stat().st_size for w in got)
    print(f"{len(got)} wheels, {size / 2**20:.1f} MiB in {args.wheels} for Python {', '.join(dict.fromkeys([GPU_PYTHON, *args.python_version]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
