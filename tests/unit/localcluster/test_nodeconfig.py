"""The real node's kubelet config (localcluster/nodeconfig.py): the settings the harness relies on."""

from __future__ import annotations

from pathlib import Path

from localcluster.nodeconfig import kubelet_config
from ocr_operator.runtime.drift import parse_quantity


def config() -> dict:
    return kubelet_config(Path("/nonexistent"), 0, 0)


def test_eviction_thresholds_are_absolute_so_the_free_share_of_a_big_shared_disk_never_trips_them():
    hard = config()["evictionHard"]
    assert set(hard) == {"memory.available", "nodefs.available", "imagefs.available", "nodefs.inodesFree"}
    assert not any(v.endswith("%") for v in hard.values()), hard
    for signal in ("nodefs.available", "imagefs.available", "memory.available"):
        assert parse_quantity(hard[signal]) <= 512 * 2**20, (signal, hard[signal])
    assert parse_quantity(hard["nodefs.inodesFree"]) <= 100_000


def test_a_pressure_blip_untaints_the_node_within_seconds_not_kubelets_default_five_minutes():
    period = config()["evictionPressureTransitionPeriod"]
    assert period.endswith("s") and float(period[:-1]) <= 30, period
