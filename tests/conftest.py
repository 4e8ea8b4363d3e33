"""Test distribution for `make test`, which runs pytest-xdist in three workers.

On 2 cores the suite is mostly waiting: the e2e tier waits on the API server, the kubelet and
containers while the unit and server tiers are CPU-bound, so running them side by side saves more
than half of the serial wall time (the run's CPU time is about 60 % of its wall time with 2 workers).

Units of work, each run by one worker from its start to its end:
- the e2e tier in two units, each with its own session-scoped local cluster: the real-node tests
  (modules `tests/e2e/test_realnode*.py`), whose worker alone adds the machine's one real node to
  its cluster; and the kwok tests, whose cluster has kwok nodes only;
- any other test with its module, so a module's fixtures start once.
The heaviest units start first (`HEAVY_FIRST`, by measured duration), the rest by size.

The grouping is a scheduler (xdist's `pytest_xdist_make_scheduler` hook), not `xdist_group`
marks: with pytest 9 those marks no longer group anything (xdist 3.8 renames `item._nodeid`,
which pytest 9 no longer reads).
"""

from __future__ import annotations

import pytest

E2E_REAL_NODE = "tests/e2e (real node)"
E2E_KWOK = "tests/e2e (kwok)"
# Measured with --junitxml in a three-worker run on 2026-12-02 (seconds of the tests' own time):
# the real-node unit ~1210 plus test_rollback.py ~240 when that kwok module ran in its cluster (the
# run's critical path: 1446 of 1472 s), the engine equivalence module ~830 (two servers with the
# full-size vision tower), the kwok e2e unit ~810 without test_rollback.py; 4082 in all.
HEAVY_FIRST = (E2E_REAL_NODE, "tests/server/test_engine_equivalence.py", E2E_KWOK)


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: one of the two e2e units, else its module."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/e2e/"):
        return E2E_REAL_NODE if path.startswith("tests/e2e/test_realnode") else E2E_KWOK
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
