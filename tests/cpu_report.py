"""`--cpu-report FILE`: the CPU each test used, for finding where the suite's time goes.

`hack/suite-cpu.py` says which programs a run's CPU went to (pytest workers, servers, the real
node's pods, vLLM); this says which tests, inside the pytest processes: per test, the worker's own
CPU (`time.process_time`), the CPU of its children reaped during the test (`RUSAGE_CHILDREN`: tools
and servers the test started and stopped; a child reaped later is counted where it was reaped), and
the wall time. Each xdist worker sends its rows to the controller, which writes them all to FILE as
JSON and prints the modules that used the most.

    make test PYTEST_ARGS="--cpu-report /tmp/cpu.json"

Not counted: processes that are not the workers' children (a real node's pods, a zygote's forks).
"""

from __future__ import annotations

import json
import resource
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

SHOWN = 15  # modules printed at the end of the run
Row = tuple[str, float, float, float]  # nodeid, own CPU s, reaped children's CPU s, wall s


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-report", type=Path, default=None, metavar="FILE",
                     help="write each test's CPU seconds (its worker's own, its reaped children's) and wall to FILE")


def children_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def by_module(rows: list[Row]) -> list[tuple[str, float, float, float]]:
    """(module, own, children, wall) summed over each module's tests, most CPU first (pure)."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for nodeid, own, children, wall in rows:
        total = sums[nodeid.split("::", 1)[0]]
        total[0], total[1], total[2] = total[0] + own, total[1] + children, total[2] + wall
    return sorted(((m, *v) for m, v in sums.items()), key=lambda r: -(r[1] + r[2]))


class CpuReport:
    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config, self.path = config, path
        self.rows: list[Row] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        own, children, wall = time.process_time(), children_seconds(), time.monotonic()
        yield
        self.rows.append((item.nodeid, round(time.process_time() - own, 3),
                          round(children_seconds() - children, 3), round(time.monotonic() - wall, 3)))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(self.config, "workerinput"):  # an xdist worker: its rows go to the controller
            self.config.workeroutput["cpu_report"] = json.dumps(self.rows)

    @pytest.hookimpl(optionalhook=True)  # xdist's hook: absent in a run without it
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """The controller's side: a worker's rows, sent when it finished."""
        self.rows += [tuple(row) for row in json.loads(getattr(node, "workeroutput", {}).get("cpu_report", "[]"))]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        self.path.write_text(json.dumps({"tests": self.rows}, indent=1) + "\n")
        own = sum(r[1] for r in self.rows)
        children = sum(r[2] for r in self.rows)
        terminalreporter.write_sep("-", f"CPU by module ({len(self.rows)} tests: {own:.0f} s in pytest, "
                                        f"{children:.0f} s in reaped children; all rows in {self.path})")
        for module, m_own, m_children, m_wall in by_module(self.rows)[:SHOWN]:
            terminalreporter.write_line(f"{m_own:8.1f} own {m_children:8.1f} children {m_wall:8.1f} wall  {module}")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--cpu-report")
    if path is not None:
        config.pluginmanager.register(CpuReport(config, path), "cpu-report")
