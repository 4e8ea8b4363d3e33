"""Test distribution for `make test`, which runs pytest-xdist in three workers.

On 2 cores the suite is mostly waiting: the e2e tier waits on the API server, the kubelet and
containers while the unit and server tiers are CPU-bound, so running them side by side saves more
than half of the serial wall time (the run's CPU time is about 60 % of its wall time with 2 workers).

Units of work, each run by one worker from its start to its end:
- the e2e tier in two units, each with its own session-scoped local cluster: the real-node tests
  (modules `tests/e2e/test_realnode*.py`), whose worker alone adds the machine's one real node to
  its cluster; and the kwok tests, whose cluster has kwok nodes only;
- the server modules whose tests or fixtures take the session's main server (`main_server` or
  `server` of tests/server/conftest.py, found in their source by `main_server_modules`): one unit,
  so that server starts once in the run (as units of their own, each worker that ran one of them
  started its own copy, with the tiny model written again for it);
- any other test with its module, so a module's fixtures start once.
The heaviest units start first (`HEAVY_FIRST`, by measured duration), the rest by size.

The grouping is a scheduler (xdist's `pytest_xdist_make_scheduler` hook), not `xdist_group`
marks: with pytest 9 those marks no longer group anything (xdist 3.8 renames `item._nodeid`,
which pytest 9 no longer reads).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

E2E_REAL_NODE = "tests/e2e (real node)"
E2E_KWOK = "tests/e2e (kwok)"
# Measured with --junitxml in a three-worker run on 2026-12-02 (seconds of the tests' own time):
# the real-node unit ~1210 plus test_rollback.py ~240 when that kwok module ran in its cluster (the
# run's critical path: 1446 of 1472 s), the engine equivalence module ~830 (two servers with the
# full-size vision tower), the kwok e2e unit ~810 without test_rollback.py; 4082 in all.
HEAVY_FIRST = (E2E_REAL_NODE, "tests/server/test_engine_equivalence.py", E2E_KWOK)
MAIN_SERVER = "tests/server (main server)"
MAIN_SERVER_FIXTURES = frozenset({"main_server", "server"})  # session fixtures of tests/server/conftest.py
SERVER_TESTS = Path(__file__).resolve().parent / "server"


def takes_main_server(source: str) -> bool:
    """Whether a test or fixture in this module source asks for the session's main server: an
    argument named `main_server` or `server`, where the module does not define a fixture of that
    name itself (its own would shadow the session's)."""
    functions = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fixtures = {n.name for n in functions if any("fixture" in ast.unparse(d) for d in n.decorator_list)}
    wanted = MAIN_SERVER_FIXTURES - fixtures
    return any((n.name.startswith("test_") or n.name in fixtures) and {a.arg for a in n.args.args} & wanted
               for n in functions)


@functools.cache
def main_server_modules() -> frozenset[str]:
    """The tests/server modules that take the main server, read from their source once per process
    (a module that starts to use it joins the unit without a list to keep up)."""
    return frozenset(f"tests/server/{p.name}" for p in sorted(SERVER_TESTS.glob("test_*.py"))
                     if takes_main_server(p.read_text()))


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: one of the two e2e units, the main server's, else its module."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/e2e/"):
        return E2E_REAL_NODE if path.startswith("tests/e2e/test_realnode") else E2E_KWOK
    if path in main_server_modules():
        return MAIN_SERVER
    return path


def start_order(units: list[str]) -> list[str]:
    """`HEAVY_FIRST` in its order, then the others as given (xdist gives them largest first)."""
    heavy = [u for u in HEAVY_FIRST if u in units]
    return heavy + [u for u in units if u not in heavy]


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduler with `work_unit` as the scope, heaviest units first."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            # The first hand-out puts the heaviest units at the head of the (filled) work queue.
            if not getattr(self, "_ordered", False):
                self._ordered = True
                queue = dict(self.workqueue)
                self.workqueue.clear()
                for unit in start_order(list(queue)):
                    self.workqueue[unit] = queue[unit]
            super()._assign_work_unit(node)

    return TierScheduling(config, log)
