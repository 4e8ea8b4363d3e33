"""spec.ttlSecondsAfterFinished: an ended batch is deleted once its time is up and its callback's
delivery ended, as a Job's TTL does (decide.expires_in; the controller's delete or requeue)."""

from __future__ import annotations

import datetime as dt
import logging

import pytest

from ocr_limits.timestamps import iso
from ocr_operator.ocrbatch import decide
from ocr_operator.runtime.kube import ApiError

from tests.unit.batch.test_controller import NOW, batch, reconcile, world
from tests.unit.batch.test_controller_waiting import STARTED, job, world as job_world

ENDED_10S_AGO = {"phase": "Succeeded", "jobName": "archive",
                 "completionTime": iso(NOW - dt.timedelta(seconds=10))}
DELIVERED = {"event": "batch.completed", "state": "Delivered", "attempts": 1}
HOOK = {"url": "https://hooks.example/ocr", "secretRef": {"name": "hook"}}


def test_the_time_left_counts_from_the_end_and_waits_for_the_callback():
    assert decide.expires_in(batch(ENDED_10S_AGO, ttlSecondsAfterFinished=60), NOW) == 50
    assert decide.expires_in(batch(ENDED_10S_AGO, ttlSecondsAfterFinished=0), NOW) == -10
    assert decide.expires_in(batch(ENDED_10S_AGO), NOW) is None  # no TTL: kept
    running = {**ENDED_10S_AGO, "phase": "Running"}
    assert decide.expires_in(batch(running, ttlSecondsAfterFinished=0), NOW) is None
    owed = batch(ENDED_10S_AGO, ttlSecondsAfterFinished=0, callback=HOOK)
    assert decide.expires_in(owed, NOW) is None  # its callback is still to deliver
    delivered = batch({**ENDED_10S_AGO, "callback": DELIVERED}, ttlSecondsAfterFinished=0, callback=HOOK)
    assert decide.expires_in(delivered, NOW) == -10


def test_an_ended_batch_past_its_ttl_is_deleted():
    kube, batches = world(batch(ENDED_10S_AGO, ttlSecondsAfterFinished=5))
    result = reconcile(batches, batch(ENDED_10S_AGO, ttlSecondsAfterFinished=5))
    assert ("delete", "OcrBatch", "archive") in kube.calls and ("OcrBatch", "archive") not in kube.objects
    assert result.writes == 1


def test_a_refused_delete_is_an_error_of_the_reconcile_and_is_not_logged_as_done(caplog):
    kube, batches = world(batch(ENDED_10S_AGO, ttlSecondsAfterFinished=5))

    async def forbidden(kind, namespace, name, *, uid=None):
        raise ApiError(403, "Forbidden", f'{kind} "{name}" is forbidden: cannot delete resource')
    kube.delete = forbidden
    with caplog.at_level(logging.INFO), pytest.raises(ApiError):  # the runtime retries it with backoff
        reconcile(batches, batch(ENDED_10S_AGO, ttlSecondsAfterFinished=5))
    assert not [r for r in caplog.records if "deleted" in r.getMessage()]


def test_an_ended_batch_within_its_ttl_is_looked_at_again_when_it_runs_out():
    kube, batches = world(batch(ENDED_10S_AGO, ttlSecondsAfterFinished=60))
    result = reconcile(batches, batch(ENDED_10S_AGO, ttlSecondsAfterFinished=60))
    assert not any(c[0] == "delete" for c in kube.calls)
    assert result.requeue_after == 50


def test_a_batch_that_ends_with_a_ttl_of_0_is_deleted_by_the_reconcile_that_ends_it():
    done = job(succeeded=2, conditions=[{"type": "Complete", "status": "True"}])
    kube, batches = job_world(done, batch(STARTED, ttlSecondsAfterFinished=0))
    reconcile(batches, batch(STARTED, ttlSecondsAfterFinished=0))
    assert kube.status["phase"] == "Succeeded"  # the end written first, then the delete
    assert ("delete", "OcrBatch", "archive") in kube.calls
