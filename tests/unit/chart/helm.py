"""Run the helm binary on the chart (helm template needs no cluster).

helm comes from the local control plane's binaries (`make cluster-binaries`, which `make test`
runs first), from $HELM, or from PATH.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "causalflow-ocr"


def helm_binary() -> str | None:
    if os.environ.get("HELM"):
        return os.environ["HELM"]
    bin_dir = subprocess.run(
        ["bash", str(ROOT / "localcluster" / "build-binaries.sh"), "--print-dir"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()
    if bin_dir and (Path(bin_dir) / "helm").exists():
        return str(Path(bin_dir) / "helm")
    return shutil.which("helm")


def require_helm() -> str:
    found = helm_binary()
    if not found:
        pytest.skip("helm not built yet: `make cluster-binaries` (make test does it) or set HELM=/path/to/helm")
    return found


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([require_helm(), *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}{result.stderr}")
    return result


def set_args(values: dict[str, str] | None) -> list[str]:
    out: list[str] = []
    for key, value in (values or {}).items():
        out += ["--set", f"{key}={value}"]
    return out


def template(values: dict[str, str] | None = None, *, namespace: str = "ocr-system",
             release: str = "ocr", extra: tuple[str, ...] = ()) -> str:
    return run_helm("template", release, str(CHART), "--namespace", namespace,
                    *set_args(values), *extra).stdout


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """A YAML loader that refuses duplicate keys (a template bug PyYAML would hide). libyaml's
    parser where PyYAML has it: the pure-Python one was most of the chart tests' own CPU."""


def _no_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise AssertionError(f"duplicate key {key!r} at line {key_node.start_mark.line + 1}")
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def objects(rendered: str) -> list[dict]:
    return [doc for doc in yaml.load_all(rendered, Loader=_StrictLoader) if doc]


def by_kind(rendered: str, kind: str) -> list[dict]:
    return [o for o in objects(rendered) if o["kind"] == kind]
