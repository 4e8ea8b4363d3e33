"""How many CPUs this process may use, and the preprocessing threads that follows from it.

A pod sees every CPU of its node in its affinity mask; its limit is a CFS quota on its cgroup
(cgroup v2: cpu.max; v1: cpu.cfs_quota_us over cpu.cfs_period_us). The usable count is the smaller.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")
PREPROCESS_WORKERS_MIN, PREPROCESS_WORKERS_MAX = 2, 8


def quota(cpu_max: str | None = None, cfs_quota_us: str | None = None, cfs_period_us: str | None = None) -> float | None:
    """CPUs a cgroup's quota allows (pure): cgroup v2's `cpu.max` ("max 100000" or "200000 100000"),
    else v1's quota and period; None when unlimited or unknown."""
    try:
        if cpu_max is not None:
            limit, period = cpu_max.split()[:2]
            return None if limit == "max" else int(limit) / int(period)
        if cfs_quota_us is not None and cfs_period_us is not None:
            limit = int(cfs_quota_us)
            return None if limit <= 0 else limit / int(cfs_period_us)
    except ValueError:
        return None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def usable() -> float:
    """The CPUs this process may run on, capped by its cgroup's quota."""
    count = float(len(os.sched_getaffinity(0)))
    cap = quota(_read(CGROUP / "cpu.max"), _read(CGROUP / "cpu" / "cpu.cfs_quota_us"), _read(CGROUP / "cpu" / "cpu.cfs_period_us"))
    return min(count, cap) if cap else count


def default_preprocess_workers(cpus: float) -> int:
    """PREPROCESS_WORKERS when unset (pure): one thread per usable CPU, 2 to 8. A 1024x1024 page takes
    about 70 ms of one CPU to decode, crop and normalise (an H200 machine's, 2026-12-04), so two
    threads let 64 pages arriving together wait 2.2 s for the last one; eight, 0.6 s."""
    return max(PREPROCESS_WORKERS_MIN, min(PREPROCESS_WORKERS_MAX, math.floor(cpus)))
