"""A replica of the GPU machine's Python, here, and the GPU check run in it on the CPU (`make gpu-replica`).

The GPU machine (docs/development/benchmarks.md, "The GPU check") runs `bench/gpu_check.sh` under
its own python3: the interpreter of a virtual environment (Python 3.12) holding torch 2.11 and
transformers 5.17, without fastapi, uvicorn, python-multipart, pypdfium2 or pydantic, and with no
package index. This builds an environment of that shape, cached under
~/.cache/causalflow-ocr/gpu-replica/ by its versions:

- a venv made by Python 3.12 where this machine has one (pyenv's), else by this python3 (3.11;
  then `--prepare` packs the compiled wheels for both Pythons);
- torch 2.11.0 from PyPI: its Linux x86-64 wheel is the CUDA 13.0 build, the very build the GPU
  machine has (2.11.0+cu130), which runs on the CPU; the CPU-only build is not on PyPI;
- transformers 5.17.0, and the image's other packages at the versions read off that machine where
  known (numpy, safetensors, tokenizers, huggingface_hub, triton) or PyPI's newest (pyyaml, pillow,
  httpx, prometheus-client, regex); pydantic, which transformers' typer pulls in here, is removed,
  as that image has none;
- the wheels of `bench/gpu_check.sh --prepare` (bench/gpu_wheels.py), keyed by what they are made from.

`run` then starts `bench/gpu_check.sh` with that venv's python3 first on PATH, PIP_NO_INDEX=1 and,
where the kernel allows, in a network namespace of its own (only loopback), on the CPU with the
tiny model: every phase (install, model, identity, raw, server at every client level) runs and
writes the same files as on the GPU machine.

    python3 bench/gpu_replica.py build                 # make setup (cached: seconds when warm)
    python3 bench/gpu_replica.py run --out DIR         # make gpu-replica
    python3 bench/gpu_replica.py run --short --out DIR # the test's variant (tests/unit/bench/test_gpu_replica.py)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("CAUSALFLOW_CACHE", Path.home() / ".cache" / "causalflow-ocr")) / "gpu-replica"
# The GPU machine's python3 packages, at the versions read off it where known (docs: KINDS of the device).
IMAGE_PACKAGES = ("torch==2.11.0", "transformers==5.17.0", "numpy==2.5.2", "safetensors==0.8.0", "tokenizers==0.23.2",
                  "huggingface_hub==1.33.0", "triton==3.6.0", "pyyaml", "pillow", "httpx", "prometheus-client", "regex")
NOT_ON_IMAGE = ("fastapi", "uvicorn", "python-multipart", "pypdfium2", "pydantic", "pydantic-core")
REMOVED = ("pydantic", "pydantic-core")  # pulled in here by typer (transformers' CLI); not on the image

# The run's sizes: the tiny model on the CPU; every phase and every client level as on the GPU machine.
FULL_ARGS = ["--device", "cpu", "--model", "tiny", "--size", "640", "--new-tokens", "16", "--images", "32",
             "--reference-pages", "2", "--experts-compare", "--clients", "1,64,32,8", "--identity-pages", "3", "--identity-new-tokens", "12",
             "--identity-slots", "2", "--profile-ks", "1,2", "--contention", "1,2",
             "--server-variants", "PREPROCESS_MODE=processes", "--plan",
             "install=120,model=120,identity=300,raw=1200,server=900,profile=240"]
SHORT_ARGS = ["--device", "cpu", "--model", "tiny", "--size", "320", "--new-tokens", "8", "--images", "8",
              "--reference-pages", "1", "--experts-compare", "--clients", "1,4,2", "--identity-pages", "2", "--identity-new-tokens", "6",
              "--identity-slots", "1", "--profile-ks", "1,2", "--contention", "1",
              # the GPU machine's first variant, refused on a CPU: recorded, and the next one still measured
              "--server-variants", "DECODE_COMPILE=true,PREPROCESS_MODE=processes;PREPROCESS_WORKERS=1", "--plan",
              "install=120,model=90,identity=120,raw=240,server=300,profile=120"]


@dataclass(frozen=True)
class Replica:
    python: Path  # the replica's python3 (a venv's interpreter)
    version: str  # its major.minor
    wheels: Path  # what --prepare packed for it and for the GPU machine's 3.12


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


def find_python312() -> str | None:
    """Python 3.12 where this machine has one: pyenv's, or on PATH (a pyenv shim there may not run)."""
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    for candidate in [*sorted(glob.glob(f"{root}/versions/3.12.*/bin/python3.12"), reverse=True), shutil.which("python3.12")]:
        if candidate and subprocess.run([candidate, "-c", "import sys, venv; assert sys.version_info[:2] == (3, 12)"],
                                        capture_output=True).returncode == 0:
            return candidate
    return None


def python_version(python: str) -> str:
    return subprocess.run([python, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                          check=True, capture_output=True, text=True).stdout.strip()


def env_dir(version: str) -> Path:
    return CACHE / f"env-py{version}-torch2.11.0-transformers5.17.0-{digest(*IMAGE_PACKAGES, *REMOVED)}"


def build_env(base_python: str) -> Path:
    """The venv of the GPU machine's shape (cached: a stamp holds its pip freeze)."""
    venv = env_dir(python_version(base_python))
    stamp = venv / ".built"
    if stamp.is_file():
        return venv
    prune(CACHE, "env-", keep=venv.name)
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([base_python, "-m", "venv", str(venv)], check=True)  # with pip: the check's install phase runs it
    py = str(venv / "bin" / "python3")
    # make setup's uv when there is one: it links from its cache, where pip unpacked and byte-compiled
    # every file of torch's wheel (84 CPU s of a cold set-up); the check's phases compile what they import.
    uv = ROOT / ".venv" / "bin" / "uv"
    if uv.is_file():
        subprocess.run([str(uv), "pip", "install", "-q", "--python", py, *IMAGE_PACKAGES], check=True)
        subprocess.run([str(uv), "pip", "uninstall", "-q", "--python", py, *REMOVED], check=True)
    else:
        subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", *IMAGE_PACKAGES], check=True)
        subprocess.run([py, "-m", "pip", "uninstall", "-q", "-y", *REMOVED], check=True)
    freeze = subprocess.run([py, "-m", "pip", "freeze"], check=True, capture_output=True, text=True).stdout
    present = {line.split("==")[0].lower().replace("_", "-") for line in freeze.splitlines()}
    if unwanted := sorted(present & set(NOT_ON_IMAGE)):
        raise SystemExit(f"the replica holds {unwanted}, which the GPU machine lacks")
    stamp.write_text(freeze)
    return venv


def wheels_dir(versions: list[str]) -> Path:
    """Keyed by everything the pack is made from: the server's requirements, the venv's versions, the packer."""
    freeze = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "pip", "freeze", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    key = digest((ROOT / "server" / "pyproject.toml").read_text(), freeze, (ROOT / "bench" / "gpu_wheels.py").read_text(), *versions)
    return CACHE / f"wheels-{key}"


def prepare_wheels(replica_version: str) -> Path:
    """`bench/gpu_check.sh --prepare` into the cache (the GPU machine's 3.12, and the replica's Python)."""
    minor = ".".join(replica_version.split(".")[:2])
    wheels = wheels_dir([minor])
    if (wheels / "requirements.txt").is_file():
        return wheels
    prune(CACHE, "wheels-", keep=wheels.name)
    subprocess.run(["bash", str(ROOT / "bench" / "gpu_check.sh"), "--prepare", "--wheels", str(wheels),
                    "--python-version", minor], check=True, cwd=ROOT)
    return wheels


def prune(parent: Path, prefix: str, keep: str) -> None:
    """Earlier versions' folders go: each env is gigabytes."""
    for old in parent.glob(f"{prefix}*") if parent.is_dir() else []:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def exclusive(lock: Path):
    """One build of the cache at a time: two at once (a set-up and a test, say) install into the
    same venv and one of them fails half-way on files the other moved."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def build() -> Replica:
    with exclusive(CACHE / ".lock"):
        return _build()


def _build() -> Replica:
    base = find_python312()
    if base is None:
        print("gpu-replica: no Python 3.12 here; the replica uses this python3 "
              f"({sys.version.split()[0]}) and --prepare packs wheels for 3.12 and it", file=sys.stderr)
        base = sys.executable
    venv = build_env(base)
    version = python_version(str(venv / "bin" / "python3"))
    return Replica(python=venv / "bin" / "python3", version=version, wheels=prepare_wheels(version))


def isolated(argv: list[str]) -> list[str]:
    """argv in a network namespace with loopback only (no package index, as on the GPU machine), where allowed."""
    probe = subprocess.run(["unshare", "--net", "--", "true"], capture_output=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        print("gpu-replica: no network namespace here (unshare --net refused): the run relies on PIP_NO_INDEX=1", file=sys.stderr)
        return argv
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def run_env(replica: Replica, out: Path) -> dict[str, str]:
    """The GPU machine's environment: its python3 first on PATH, no index, nothing of this project's venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV", "CUDA_VISIBLE")) and k not in ("OUT",)}
    env.update({"PATH": f"{replica.python.parent}:{env.get('PATH', '/usr/bin:/bin')}", "PIP_NO_INDEX": "1",
                "PIP_DISABLE_PIP_VERSION_CHECK": "1", "OUT": str(out), "CUDA_VISIBLE_DEVICES": ""})
    return env


def run(replica: Replica, out: Path, short: bool, scratch: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    argv = ["bash", str(ROOT / "bench" / "gpu_check.sh"), *(SHORT_ARGS if short else FULL_ARGS),
            "--wheels", str(replica.wheels), "--scratch", str(scratch)]
    return subprocess.run(isolated(argv), env=run_env(replica, out), cwd=ROOT).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["build", "run"])
    p.add_argument("--out", type=Path, default=Path("/tmp/gpu-replica-out"), help="the run's result files ($OUT)")
    p.add_argument("--short", action="store_true", help="the smaller sizes the test runs")
    args = p.parse_args()
    replica = build()
    print(json.dumps({"python": str(replica.python), "version": replica.version, "wheels": str(replica.wheels)}))
    if args.action == "build":
        return 0
    with tempfile.TemporaryDirectory(prefix="gpu-replica-") as scratch:
        return run(replica, args.out, args.short, Path(scratch))


if __name__ == "__main__":
    sys.exit(main())
