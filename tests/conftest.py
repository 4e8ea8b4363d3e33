"""Test distribution for `make test`, which runs pytest-xdist in two workers.

On 2 cores the suite is mostly waiting: the e2e tier waits on the API server, kubelet and
containers while the unit and server tiers are CPU-bound, so running them side by side saves
about a third of the wall time. The e2e tier shares one session-scoped local cluster (and the
machine has one real-node slot), so all of it is one unit of work for one worker; any other test
goes with its module, so a module's fixtures start once.

The grouping is a scheduler (xdist's `pytest_xdist_make_scheduler` hook), not `xdist_group`
marks: with pytest 9 those marks no longer group anything (xdist 3.8 renames `item._nodeid`,
which pytest 9 no longer reads).
"""

from __future__ import annotations

import pytest


def work_unit(nodeid: str) -> str:
    """The unit of work a test belongs to: `tests/e2e` as a whole, else its module."""
    path = nodeid.split("::", 1)[0]
    return "tests/e2e" if path.startswith("tests/e2e/") else path


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        """xdist's load-by-scope scheduler with `work_unit` as the scope (largest unit first)."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return TierScheduling(config, log)
