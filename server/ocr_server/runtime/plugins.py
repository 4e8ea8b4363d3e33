"""Plugins: modules named in SERVER_PLUGINS, imported at start, that may hook the engine thread.

A plugin is a module with `install(hooks: EngineHooks) -> None`. None is loaded unless
SERVER_PLUGINS names it, and the server warns at start when any is (startup_checks.startup_warnings). The
one user is the test suite's fault plugin (`ocr_server_testing.faults`, in the test image only):
it hangs the engine thread on cue, to prove that liveness restarts a wedged pod, and can pace the
decode steps like a slower accelerator. The product has no test code: it only calls the hooks a
plugin installed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .config import ConfigError


@dataclass
class EngineHooks:
    """What plugins installed, called on the engine thread: `before_work` before each batch runs
    (the generate batcher) or pages join the slots decoder; `after_step` after each step of the
    slots decoder, once the rows that ended are answered."""

    before_work: list[Callable[[], None]] = field(default_factory=list)
    after_step: list[Callable[[], None]] = field(default_factory=list)

    def run_before_work(self) -> None:
        for hook in self.before_work:
            hook()

    def run_after_step(self) -> None:
        for hook in self.after_step:
            hook()


def load_plugins(names: Sequence[str]) -> EngineHooks:
    """Import each named module and let it install its hooks; ConfigError naming SERVER_PLUGINS when
    one cannot be imported or has no install(hooks)."""
    hooks = EngineHooks()
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ConfigError(f"SERVER_PLUGINS: {name} cannot be imported: {exc}") from None
        install: Callable[[EngineHooks], None] | None = getattr(module, "install", None)
        if not callable(install):
            raise ConfigError(f"SERVER_PLUGINS: {name} has no install(hooks) function")
        install(hooks)
    return hooks
