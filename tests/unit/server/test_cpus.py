"""PREPROCESS_WORKERS, when unset, is one thread per CPU the server may use (its affinity, capped by
its cgroup's CPU quota, a pod's limit), 2 to 8."""

from __future__ import annotations

import pytest

from ocr_server.runtime import cpus
from ocr_server.runtime.config import load_config


@pytest.mark.parametrize("args,want", [
    (("max 100000",), None),  # cgroup v2, no limit
    (("250000 100000\n",), 2.5),  # a pod's limit of 2500m
    ((None, "-1", "100000"), None),  # cgroup v1, no limit
    ((None, "400000", "100000"), 4.0),
    ((None, None, None), None),  # no cgroup files
    (("garbage",), None),
])
def test_a_cgroups_quota_is_read_in_cpus(args, want):
    assert cpus.quota(*args) == want


@pytest.mark.parametrize("usable,want", [(1, 2), (2.5, 2), (4, 4), (16, 8), (128, 8)])
def test_one_preprocessing_thread_per_usable_cpu_from_2_to_8(usable, want):
    assert cpus.default_preprocess_workers(usable) == want


def test_unset_preprocess_workers_follow_the_cpus_and_a_set_value_is_kept(monkeypatch):
    monkeypatch.setattr("ocr_server.runtime.config.usable_cpus", lambda: 16.0)
    assert load_config(env={}).runtime.preprocess_workers == 8
    assert load_config(env={"PREPROCESS_WORKERS": "3"}).runtime.preprocess_workers == 3
