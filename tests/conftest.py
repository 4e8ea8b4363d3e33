"""Test distribution for `make test`, which runs pytest-xdist in four workers (three with
CAUSALFLOW_REAL_NODE_UNITS=1).

The e2e tier mostly waits on the API server, the kubelet and containers while the unit and server
tiers are CPU-bound, so running them side by side saves more than half of the serial wall time: on
2 cores the four workers keep them about 90 % busy.

Units of work, each run by one worker from its start to its end:
- the e2e tier: the kwok tests, one unit; and the real-node tests (modules
  `tests/e2e/test_realnode*.py`): two units (`real_node_unit`: halves of about the same measured
  duration), or one (`real_node_units`). Their workers share one cluster, with the machine's one
  real node and kwok's GPU nodes (tests/e2e/conftest.py, localcluster/sharing.py); the few kwok
  tests that restart the API server or act on every namespace start a cluster of their own
  (`private_cluster`). The tests that stop or restart a part of the node (marked
  `exclusive`, last in their modules) run while the other worker waits; their modules go to the
  first half, so two such stretches never queue behind each other;
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
import os
import shutil
import tempfile
from pathlib import Path

import pytest

pytest_plugins = ["tests.cpu_report"]  # --cpu-report FILE: each test's CPU seconds

E2E_REAL_NODE = "tests/e2e (real node)"
E2E_KWOK = "tests/e2e (kwok)"
# Measured with --junitxml in a three-worker run on 2026-12-02 (seconds of the tests' own time):
# the real-node unit ~1210 plus test_rollback.py ~240 when that kwok module ran in its cluster (the
# run's critical path: 1446 of 1472 s), the engine equivalence module ~830 (two servers with the
# full-size vision tower), the kwok e2e unit ~810 without test_rollback.py; 4082 in all.
E2E_REAL_NODE_UNITS = (f"{E2E_REAL_NODE} 1", f"{E2E_REAL_NODE} 2")
HEAVY_FIRST = (E2E_REAL_NODE, *E2E_REAL_NODE_UNITS, "tests/server/test_engine_equivalence.py", E2E_KWOK)
# The real-node tests in two units, also on 2 cores, where make test is CPU-bound for most of its
# run: on 2026-12-05 (fresh clones, 2 cores) two real-node workers (4 in all) took 1,010 s against
# 1,129 s, for 1,829 CPU s against 1,740; on 2026-12-02, with 2,172 CPU s against 1,960, they had
# measured no faster (1,158 s against 1,201). On their own, `pytest -n 2` of the real-node modules
# took 582 s against 868.
REAL_NODE_UNITS_ENV = "CAUSALFLOW_REAL_NODE_UNITS"
# Seconds of each real-node module's tests in a whole `make test` (2 cores, 2026-12-06, the mean of
# three runs): what `real_node_unit` balances. They include the modules' waits for the other
# real-node worker (an exclusive test waits for that worker's module to end, 0 to 70 s from run to
# run), which measured alone they lack. A module not listed counts as 40.
REAL_NODE_SECONDS = {
    "test_realnode_faults": 247, "test_realnode_batch_faults": 170, "test_realnode": 132,
    "test_realnode_quality_gate": 110, "test_realnode_batch": 103, "test_realnode_autoscaling_queue_depth": 72,
    "test_realnode_quality_gate_shadow": 63, "test_realnode_batch_stall": 56, "test_realnode_batch_poison": 52,
    "test_realnode_model_image": 52, "test_realnode_quality_gate_auth": 51, "test_realnode_model_s3": 45,
    "test_realnode_batch_helm": 42, "test_realnode_images": 41, "test_realnode_rotation": 41,
    "test_realnode_quality_gate_loop": 35, "test_realnode_serving": 25, "test_realnode_rollback": 23,
    "test_realnode_operator": 20, "test_realnode_s3": 3,
}

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


def real_node_halves(modules: dict[str, float], exclusive: frozenset[str]) -> tuple[set[str], set[str]]:
    """Two sets of modules whose durations (`modules`: name -> seconds) are about equal: those with
    exclusive tests all in the first (their stretches alone never wait for each other), the others
    longest first, each to the half with less so far."""
    halves: tuple[set[str], set[str]] = (set(exclusive & modules.keys()), set())
    load = [sum(modules[m] for m in halves[0]), 0.0]
    for name in sorted(modules.keys() - exclusive, key=lambda m: (-modules[m], m)):
        i = 0 if load[0] <= load[1] else 1
        halves[i].add(name)
        load[i] += modules[name]
    return halves


def _mark_names(node: ast.AST) -> set[str]:
    """The NAMEs of `pytest.mark.NAME` and `pytest.mark.NAME(...)` anywhere in `node`."""
    return {n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"}


def module_marks(source: str) -> set[str]:
    """The names of the marks in a module source's `pytestmark` (`pytest.mark.NAME`, `pytest.mark.NAME(...)`)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            return _mark_names(node.value)
    return set()


def marks_of_tests(source: str) -> list[tuple[str, set[str]]]:
    """Each test function of a module source, in source order (pytest's order), with the names of
    the marks its decorators put on it."""
    return [(n.name, set().union(*map(_mark_names, n.decorator_list)))
            for n in ast.parse(source).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test_")]


def has_exclusive_tests(source: str) -> bool:
    return any("exclusive" in marks for _, marks in marks_of_tests(source))


@functools.cache
def _real_node_first_half() -> frozenset[str]:
    paths = sorted((SERVER_TESTS.parent / "e2e").glob("test_realnode*.py"))
    modules = {p.stem: REAL_NODE_SECONDS.get(p.stem, 40.0) for p in paths}
    exclusive = frozenset(p.stem for p in paths if has_exclusive_tests(p.read_text()))
    return frozenset(real_node_halves(modules, exclusive)[0])


def real_node_units() -> int:
    """1 or 2: CAUSALFLOW_REAL_NODE_UNITS, else 2."""
    return 1 if os.environ.get(REAL_NODE_UNITS_ENV) == "1" else 2


def pytest_xdist_auto_num_workers(config) -> int:
    """`-n auto` (make test): a worker for each of the heavy units that run all along (the real-node
    unit or units, the kwok unit) and one for everything else."""
    return real_node_units() + 2


def real_node_unit(path: str) -> str:
    """Which of the two real-node units a real-node module (`tests/e2e/test_realnode*.py`) is in."""
    return E2E_REAL_NODE_UNITS[Path(path).stem not in _real_node_first_half()]


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: one of the e2e units, the main server's, else its module."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/e2e/"):
        if not path.startswith("tests/e2e/test_realnode"):
            return E2E_KWOK
        return real_node_unit(path) if real_node_units() == 2 else E2E_REAL_NODE
    if path in main_server_modules():
        return MAIN_SERVER
    return path


def start_order(units: list[str]) -> list[str]:
    """`HEAVY_FIRST` in its order, then the others as given (xdist gives them largest first)."""
    heavy = [u for u in HEAVY_FIRST if u in units]
    return heavy + [u for u in units if u not in heavy]


SHARED_CLUSTER_ENV = "CAUSALFLOW_E2E_SHARED_DIR"


# In a run with workers, each process that runs torch on the CPU (a worker's in-process model tests,
# the servers under test, the GPU replica's phases) does so with one OpenMP thread unless the
# environment says otherwise: four workers share 2 cores, and a pool per process as wide as the
# machine only oversubscribes them. The tiny model's slots and batch tests measured 42 CPU s with
# two threads against 33 with one (2 cores, nothing beside them). The real node's pods have their
# own environment, from their OcrService (tests/e2e/realnode_fixtures.py puts these there).
WORKER_THREADS = {"OMP_NUM_THREADS": "1"}


def pytest_configure(config: pytest.Config) -> None:
    """In a run with xdist workers, the controller names the directory through which the workers
    that run real-node tests share one cluster (tests/e2e/conftest.py), and sets WORKER_THREADS;
    the workers, and the processes they start, inherit both."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        for key, value in WORKER_THREADS.items():
            os.environ.setdefault(key, value)
        if SHARED_CLUSTER_ENV not in os.environ:
            config._shared_cluster_dir = tempfile.mkdtemp(prefix="causalflow-e2e-shared-")
            os.environ[SHARED_CLUSTER_ENV] = config._shared_cluster_dir


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = getattr(config, "_shared_cluster_dir", None)
    if shared:
        os.environ.pop(SHARED_CLUSTER_ENV, None)
        # Never through a mount a node that failed to stop left behind (rmtree would empty its source).
        if not any(f" {shared}/" in line for line in Path("/proc/mounts").read_text().splitlines()):
            shutil.rmtree(shared, ignore_errors=True)


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
