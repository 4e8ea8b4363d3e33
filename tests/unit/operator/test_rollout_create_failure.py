"""Pods the Deployment cannot create (its ReplicaFailure condition, FailedCreate): the rollout state
machine (rollout/machine.py) waits the unschedulable grace quoting the refusal, then fails the
revision and rolls it back, with the clock passed in (no cluster)."""

from __future__ import annotations

import dataclasses

import pytest

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import PodView
from tests.unit.operator.rollout_fixtures import NEW, OLD, PROGRESSING_NEW, at, old_pods, reasons, seen, step

QUOTA = ('pods "ocr-7d9-x" is forbidden: exceeded quota: gpus, requested: requests.nvidia.com/gpu=2, '
         'used: requests.nvidia.com/gpu=2, limited: requests.nvidia.com/gpu=3')


def refused(since: float, *pods: PodView, revision: str = NEW) -> rollout.Observed:
    """A snapshot where the Deployment reports it cannot create pods (ReplicaFailure, FailedCreate)."""
    return dataclasses.replace(seen(*pods, revision=revision), create_failure=(QUOTA, at(since)))


def test_pods_the_deployment_cannot_create_are_reported_while_waiting_and_roll_back_after_the_grace():
    waiting = step(PROGRESSING_NEW, refused(1, *old_pods()), 20.9)  # grace 20 s from 1 s
    assert waiting.status.phase == rollout.PROGRESSING and waiting.target_revision == NEW
    assert waiting.requeue_after == pytest.approx(0.1)
    assert waiting.progressing.message.endswith(f"; the Deployment cannot create its pods: {QUOTA}")
    d = step(PROGRESSING_NEW, refused(1, *old_pods()), 21)
    assert d.target_revision == OLD and d.status.phase == rollout.ROLLED_BACK
    assert d.status.failed_reason == "FailedCreate"
    assert d.status.failed_message == f"the Deployment cannot create pods of revision {NEW} for 20s: {QUOTA}"
    assert reasons(d) == ["RolledBack"] and "exceeded quota: gpus" in d.events[0].message


def test_a_refusal_older_than_the_rollout_counts_from_the_rollouts_start():
    """The Deployment also reports an earlier ReplicaSet's refusal until its controller clears it."""
    d = step(PROGRESSING_NEW, refused(-300, *old_pods()), 19)  # the rollout started at 0
    assert d.status.phase == rollout.PROGRESSING and d.requeue_after == pytest.approx(1)
    assert step(PROGRESSING_NEW, refused(-300, *old_pods()), 20).status.failed_reason == "FailedCreate"


def test_a_refusal_reported_while_the_deployment_runs_another_revision_is_ignored():
    d = step(PROGRESSING_NEW, refused(1, *old_pods(), revision=OLD), 60)
    assert d.status.phase == rollout.PROGRESSING and "cannot create" not in d.progressing.message
