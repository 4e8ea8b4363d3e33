"""The scripts of hack/ as modules, so tests call their functions (their file names have dashes)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

HACK = Path(__file__).resolve().parents[1] / "hack"


def load(filename: str) -> ModuleType:
    """hack/<filename> loaded as a module (its main() is not run)."""
    spec = importlib.util.spec_from_file_location(filename.removesuffix(".py").replace("-", "_"), HACK / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
