"""The revisions' state machine (rollout/machine.py), table by table, with the clock passed in (no cluster)."""

from __future__ import annotations

import dataclasses

import pytest

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import PodView, RolloutStatus
from tests.unit.operator.rollout_fixtures import (HEALTHY_OLD, NEW, NEWER, OLD, POLICY, PROGRESSING_NEW, T0, at,
                                                  old_pods, pod, reasons, rolled_back, seen, step)

# --------------------------------------------------------------------------- starting and succeeding


def test_a_first_reconcile_without_memory_starts_rolling_out_the_desired_revision():
    d = step(RolloutStatus(), seen(replicas=2, revision=None), 0)
    assert d.target_revision == NEW
    assert d.status.phase == rollout.PROGRESSING
    assert d.status.current_revision == NEW and d.status.last_good_revision is None
    assert d.status.started_at == T0
    assert reasons(d) == ["RolloutStarted"]
    assert d.progressing.status == "True" and d.progressing.reason == "RolloutInProgress"
    assert d.degraded.status == "False"


def test_a_spec_change_on_a_healthy_service_starts_a_new_attempt_naming_the_last_good_revision():
    d = step(HEALTHY_OLD, seen(*old_pods(), revision=OLD), 0)
    assert d.target_revision == NEW
    assert d.status.phase == rollout.PROGRESSING
    assert d.status.last_good_revision == OLD
    assert d.events[0].type == "Normal" and OLD in d.events[0].message and NEW in d.events[0].message


def test_a_rollout_whose_new_pods_are_still_loading_keeps_progressing_without_events():
    d = step(PROGRESSING_NEW, seen(*old_pods(), pod("new-0", created=1)), 4)
    assert d.target_revision == NEW
    assert d.status == PROGRESSING_NEW
    assert d.events == ()
    assert "0/2 pods Ready" in d.progressing.message


def test_all_desired_new_pods_ready_starts_the_settle_clock_without_declaring_success():
    d = step(PROGRESSING_NEW, seen(pod("new-0", ready=True), pod("new-1", ready=True, created=1)), 8)
    assert d.status.phase == rollout.PROGRESSING
    assert d.status.ready_at == at(8)
    assert d.requeue_after == pytest.approx(5)
    assert d.events == ()


def test_the_settle_clock_waits_for_the_deployment_to_count_the_pods_ready_too():
    pods = (pod("new-0", ready=True), pod("new-1", ready=True, created=1))
    lagging = dataclasses.replace(seen(*pods), deployment_ready_replicas=1)
    assert step(PROGRESSING_NEW, lagging, 8).status.ready_at is None
    caught_up = dataclasses.replace(seen(*pods), deployment_ready_replicas=2)
    assert step(PROGRESSING_NEW, caught_up, 9).status.ready_at == at(9)


def test_a_revision_ready_for_the_whole_settle_period_becomes_the_last_good_revision():
    prior = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.000000Z")
    d = step(prior, seen(pod("new-0", ready=True), pod("new-1", ready=True, created=1)), 13)
    assert d.status.phase == rollout.HEALTHY
    assert d.status.last_good_revision == NEW
    assert d.target_revision == NEW
    assert reasons(d) == ["RolloutSucceeded"]
    assert d.requeue_after is None
    assert d.progressing.status == "False" and d.progressing.reason == "RolloutComplete"
    assert d.degraded.status == "False"


def test_one_second_before_the_settle_period_ends_the_revision_is_not_yet_good():
    prior = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.000000Z")
    d = step(prior, seen(pod("new-0", ready=True), pod("new-1", ready=True, created=1)), 12)
    assert d.status.phase == rollout.PROGRESSING
    assert d.requeue_after == pytest.approx(1)


def test_a_healthy_service_stays_healthy_and_silent_when_pods_come_and_go_later():
    healthy = dataclasses.replace(PROGRESSING_NEW, phase=rollout.HEALTHY, last_good_revision=NEW)
    crashing = pod("new-2", created=100, waiting_reason="CrashLoopBackOff", restarts=9)
    d = step(healthy, seen(pod("new-0", ready=True), crashing, replicas=3), 500)
    assert d.status == healthy
    assert d.events == () and d.requeue_after is None
    assert d.target_revision == NEW


# --------------------------------------------------------------------------- every failure kind rolls back

FAILURES = [
    ("ImagePullBackOff", pod("new-0", created=1, waiting_reason="ImagePullBackOff", message='Back-off pulling image "ocr:bad"'), 2),
    ("ErrImagePull", pod("new-0", created=1, waiting_reason="ErrImagePull", message="manifest unknown"), 2),
    ("CreateContainerConfigError", pod("new-0", created=1, waiting_reason="CreateContainerConfigError", message='secret "k" not found'), 2),
    ("OOMKilled", pod("new-0", created=1, phase="Running", restarts=1, last_terminated_reason="OOMKilled"), 3),
    ("CrashLoopBackOff", pod("new-0", created=1, waiting_reason="CrashLoopBackOff", restarts=1), 3),
    ("TooManyRestarts", pod("new-0", created=1, phase="Running", restarts=4, last_terminated_reason="Error"), 30),
    ("Unschedulable", pod("new-0", created=1, unschedulable=True, message="0/2 nodes are available: 2 Insufficient nvidia.com/gpu."), 21),
    ("ReadinessTimeout", pod("new-0", created=1, phase="Running", started=at(2), ready_transition=at(1)), 17),
    ("ReadinessLost", pod("new-0", created=1, phase="Running", started=at(2), ready_transition=at(9)), 11),
]


@pytest.mark.parametrize("reason,failing,seconds", FAILURES, ids=[f[0] for f in FAILURES])
def test_each_failure_kind_of_a_new_pod_rolls_back_to_the_last_good_revision(reason, failing, seconds):
    d = step(PROGRESSING_NEW, seen(*old_pods(), failing), seconds)
    assert d.target_revision == OLD, d
    assert d.status.phase == rollout.ROLLED_BACK
    assert d.status.current_revision == OLD and d.status.last_good_revision == OLD
    assert d.status.failed_revision == NEW
    assert d.status.failed_reason == reason
    assert "new-0" in d.status.failed_message
    (event,) = d.events
    assert event.type == "Warning" and event.reason == "RolledBack"
    assert reason in event.message and "new-0" in event.message and OLD in event.message
    assert d.degraded.status == "True" and d.degraded.reason == "RolledBack"
    assert reason in d.degraded.message and NEW in d.degraded.message
    assert d.requeue_after is None


def test_the_deployment_progress_deadline_rolls_back_once_the_deadline_has_elapsed():
    policy = dataclasses.replace(POLICY, progress_deadline_seconds=12)  # before the 16 s startup budget
    d = step(PROGRESSING_NEW, seen(*old_pods(), pod("new-0", created=1), deadline=True), 12, policy=policy)
    assert d.target_revision == OLD
    assert d.status.failed_reason == "ProgressDeadlineExceeded"
    assert "0/2 pods" in d.status.failed_message
    assert "ProgressDeadlineExceeded" in d.events[0].message


def test_a_stale_progress_deadline_from_the_previous_attempt_is_ignored_before_this_deadline():
    d = step(PROGRESSING_NEW, seen(*old_pods(), pod("new-0", created=1), deadline=True), 3)
    assert d.status.phase == rollout.PROGRESSING and d.target_revision == NEW


def test_a_progress_deadline_reported_for_another_revision_is_ignored():
    d = step(PROGRESSING_NEW, seen(*old_pods(), deadline=True, revision=OLD), 15)
    assert d.status.phase == rollout.PROGRESSING


def test_the_failure_message_carries_the_kubernetes_message_of_the_pod():
    failing = pod("new-0", created=1, waiting_reason="ImagePullBackOff", message='Back-off pulling image "ocr:bad"')
    d = step(PROGRESSING_NEW, seen(failing), 2)
    assert 'Back-off pulling image "ocr:bad"' in d.status.failed_message


def test_the_earliest_created_failing_pod_is_the_one_reported():
    first = pod("new-b", created=1, waiting_reason="CrashLoopBackOff", restarts=2)
    second = pod("new-a", created=2, waiting_reason="ImagePullBackOff")
    d = step(PROGRESSING_NEW, seen(second, first), 3)
    assert d.status.failed_reason == "CrashLoopBackOff" and "new-b" in d.status.failed_message


# --------------------------------------------------------------------------- what is not a failure


def test_a_new_pod_still_inside_its_startup_budget_is_not_a_failure():
    loading = pod("new-0", created=1, phase="Running", started=at(2), ready_transition=at(1))
    d = step(PROGRESSING_NEW, seen(*old_pods(), loading), 16.9)
    assert d.status.phase == rollout.PROGRESSING
    assert d.requeue_after == pytest.approx(0.1)


def test_a_new_pod_reaching_its_startup_budget_exactly_fails():
    loading = pod("new-0", created=1, phase="Running", started=at(2), ready_transition=at(1))
    d = step(PROGRESSING_NEW, seen(*old_pods(), loading), 17)
    assert d.status.failed_reason == "ReadinessTimeout"


def test_an_unschedulable_pod_inside_the_grace_period_is_not_a_failure_nor_judged_on_readiness():
    pending = pod("new-0", created=1, unschedulable=True)
    d = step(PROGRESSING_NEW, seen(*old_pods(), pending), 18)  # past the 16 s startup budget
    assert d.status.phase == rollout.PROGRESSING
    assert d.requeue_after == pytest.approx(3)


def test_restarts_up_to_the_limit_are_tolerated():
    restarted = pod("new-0", created=1, phase="Running", restarts=3, last_terminated_reason="Error")
    d = step(PROGRESSING_NEW, seen(restarted), 5)
    assert d.status.phase == rollout.PROGRESSING


def test_failures_of_old_revision_pods_are_ignored():
    broken_old = pod("old-x", OLD, created=-50, waiting_reason="CrashLoopBackOff", restarts=50)
    d = step(PROGRESSING_NEW, seen(broken_old, pod("new-0", created=1)), 4)
    assert d.status.phase == rollout.PROGRESSING and d.events == ()


def test_new_pods_being_deleted_are_not_judged():
    leaving = pod("new-0", created=1, waiting_reason="ImagePullBackOff", deleting=True)
    d = step(PROGRESSING_NEW, seen(leaving), 4)
    assert d.status.phase == rollout.PROGRESSING


def test_an_hpa_scale_up_mid_rollout_with_new_pending_pods_of_the_same_revision_is_not_a_failure():
    # Two new pods Ready and settling; the HPA raises replicas to 4; two fresh pods of the same
    # revision are pending for a node.
    settling = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.000000Z")
    pods = (
        pod("new-0", ready=True, created=1),
        pod("new-1", ready=True, created=2),
        pod("new-2", created=10),
        pod("new-3", created=10, unschedulable=True),
    )
    d = step(settling, seen(*pods, replicas=4), 11)
    assert d.status.phase == rollout.PROGRESSING
    assert d.events == ()
    assert d.status.ready_since is None  # the settle clock waits for all desired pods
    assert d.target_revision == NEW


def test_a_pod_created_in_the_same_second_after_the_settle_clock_started_has_not_lost_readiness():
    # creationTimestamp has whole seconds, readySince microseconds: a pod the HPA adds at 8.9 s
    # reads as created at 8 s, before the settle clock started at 8.6 s. It was never Ready.
    settling = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.600000Z")
    pods = (pod("new-0", ready=True, created=1), pod("new-1", ready=True, created=2), pod("new-2", created=8))
    d = step(settling, seen(*pods, replicas=3), 9.5)
    assert d.status.phase == rollout.PROGRESSING and d.status.failed_reason is None
    assert d.target_revision == NEW


def test_a_pod_that_was_ready_when_the_settle_clock_started_and_is_no_longer_ready_fails_the_revision():
    settling = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.000000Z")
    pods = (pod("new-0", ready=True, created=1), pod("new-1", ready=False, created=2, ready_transition=at(10)))
    d = step(settling, seen(*pods), 12)
    assert d.status.failed_reason == "ReadinessLost"
    assert d.target_revision == OLD


def test_a_pod_not_ready_for_less_than_the_hold_after_being_ready_restarts_the_settle_clock_without_failing():
    # The kubelet's status sync can write Ready False for milliseconds between two Trues; a probe
    # takes readiness away for a period at least. Ready's lastTransitionTime has whole seconds.
    settling = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:08.000000Z")
    blip = pod("new-1", ready=False, created=2, ready_transition=at(10))
    d = step(settling, seen(pod("new-0", ready=True, created=1), blip), 10.5)
    assert d.status.phase == rollout.PROGRESSING and d.status.failed_reason is None and d.events == ()
    assert d.status.ready_since is None and d.target_revision == NEW
    assert d.requeue_after == pytest.approx(1.5)  # judged again when the hold ends
    ready_again = dataclasses.replace(blip, ready=True, ready_transition=at(10))
    d = step(d.status, seen(pod("new-0", ready=True, created=1), ready_again), 10.6)
    assert d.status.failed_reason is None and d.status.ready_at == at(10.6)


def test_a_first_deploy_whose_pod_blips_is_not_a_revision_without_a_good_one():
    first = RolloutStatus(current_revision=NEW, phase=rollout.PROGRESSING, rollout_started="2026-03-01T12:00:00.000000Z",
                          ready_since="2026-03-01T12:00:08.000000Z")
    blip = pod("new-1", ready=False, created=2, ready_transition=at(9))
    d = step(first, seen(pod("new-0", ready=True, created=1), blip), 10.9)
    assert d.status.phase == rollout.PROGRESSING and reasons(d) == []
    d = step(first, seen(pod("new-0", ready=True, created=1), blip), 11)
    assert d.status.phase == rollout.NO_GOOD_REVISION and d.status.failed_reason == "ReadinessLost"


# --------------------------------------------------------------------------- no loop, new attempts


def test_the_failed_revision_is_not_retried_while_the_spec_still_renders_it():
    prior = rolled_back()
    for seconds in (3, 60, 3600):
        d = step(prior, seen(*old_pods(), revision=OLD), seconds)
        assert d.target_revision == OLD
        assert d.status == prior
        assert d.events == () and d.requeue_after is None
        assert d.degraded.reason == "RolledBack"


def test_a_different_spec_after_a_rollback_starts_a_new_attempt_and_clears_the_failure():
    d = step(rolled_back(), seen(*old_pods(), revision=OLD), 30, desired=NEWER)
    assert d.target_revision == NEWER
    assert d.status.phase == rollout.PROGRESSING
    assert d.status.current_revision == NEWER
    assert d.status.failed_revision is None and d.status.failed_reason is None
    assert d.status.last_good_revision == OLD
    assert d.status.started_at == at(30)
    assert reasons(d) == ["RolloutStarted"]
    assert d.degraded.status == "False"


def test_a_new_attempt_after_a_rollback_succeeds_when_its_pods_settle():
    started = step(rolled_back(), seen(*old_pods(), revision=OLD), 30, desired=NEWER).status
    ready = seen(pod("n-0", NEWER, ready=True, created=31), pod("n-1", NEWER, ready=True, created=32), revision=NEWER)
    d1 = step(started, ready, 34, desired=NEWER)
    d2 = step(d1.status, ready, 39, desired=NEWER)
    assert d2.status.phase == rollout.HEALTHY and d2.status.last_good_revision == NEWER
    assert d2.target_revision == NEWER


def test_going_back_to_the_last_good_spec_after_a_rollback_settles_as_healthy():
    d1 = step(rolled_back(), seen(*old_pods(), revision=OLD), 30, desired=OLD)
    assert d1.status.phase == rollout.PROGRESSING and d1.target_revision == OLD
    d2 = step(d1.status, seen(*old_pods(), revision=OLD), 36, desired=OLD)
    assert d2.status.phase == rollout.HEALTHY and d2.status.failed_revision is None


def test_a_spec_change_during_a_rollout_abandons_it_for_the_newer_revision():
    d = step(PROGRESSING_NEW, seen(*old_pods(), pod("new-0", created=1)), 5, desired=NEWER)
    assert d.target_revision == NEWER
    assert d.status.current_revision == NEWER and d.status.started_at == at(5)
    assert d.status.last_good_revision == OLD



# --------------------------------------------------------------------------- Ready at the change (inside settleSeconds)

SETTLING_NEW = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:03.000000Z")


def ready_new(n: int = 2) -> tuple[PodView, ...]:
    return tuple(pod(f"new-{i}", ready=True, created=1) for i in range(n))


def test_a_revision_all_ready_when_the_spec_changes_inside_the_settle_period_becomes_the_last_good_one():
    d = step(SETTLING_NEW, seen(*ready_new()), 4, desired=NEWER)  # settle would end at 8 s
    assert d.status.last_good_revision == NEW
    assert d.status.current_revision == NEWER and d.target_revision == NEWER
    assert reasons(d) == ["RolloutSucceeded", "RolloutStarted"]
    assert "Ready on 2 pods when the spec changed" in d.events[0].message


def test_the_next_revision_failing_after_a_change_inside_the_settle_period_rolls_back_to_it():
    started = step(SETTLING_NEW, seen(*ready_new()), 4, desired=NEWER).status
    failing = pod("newer-0", NEWER, created=5, waiting_reason="CrashLoopBackOff", restarts=1)
    d = step(started, seen(*ready_new(), failing, revision=NEWER), 6, desired=NEWER)
    assert d.status.phase == rollout.ROLLED_BACK
    assert d.target_revision == NEW


def test_a_revision_not_yet_all_ready_at_the_change_does_not_become_last_good():
    d = step(PROGRESSING_NEW, seen(*old_pods(), *ready_new(1), pod("new-1", created=1)), 4, desired=NEWER)
    assert d.status.last_good_revision == OLD
    assert reasons(d) == ["RolloutStarted"]


def test_a_revision_ready_only_in_the_snapshot_of_the_change_is_not_trusted():
    # ready_since is unset: no earlier reconcile saw all its pods Ready (flap protection).
    d = step(PROGRESSING_NEW, seen(*ready_new()), 4, desired=NEWER)
    assert d.status.last_good_revision == OLD


def test_a_revision_that_lost_readiness_by_the_change_does_not_become_last_good():
    pods = (pod("new-0", ready=True, created=1), pod("new-1", ready=False, created=1, ready_transition=at(3.5)))
    d = step(SETTLING_NEW, seen(*pods), 4, desired=NEWER)
    assert d.status.last_good_revision == OLD


def test_a_revision_with_a_failing_pod_at_the_change_does_not_become_last_good():
    pods = (*ready_new(), pod("new-2", created=1, waiting_reason="CrashLoopBackOff", restarts=1))
    d = step(SETTLING_NEW, seen(*pods), 4, desired=NEWER)
    assert d.status.last_good_revision == OLD


def test_a_revision_the_deployment_no_longer_runs_is_not_ready_at_the_change():
    d = step(SETTLING_NEW, seen(*ready_new(), revision=OLD), 4, desired=NEWER)
    assert d.status.last_good_revision == OLD


# --------------------------------------------------------------------------- autoRollback off, first deploy


def test_with_auto_rollback_off_a_failed_revision_stays_in_place_and_is_reported():
    policy = dataclasses.replace(POLICY, auto_rollback=False)
    failing = pod("new-0", created=1, waiting_reason="CrashLoopBackOff", restarts=2)
    d = step(PROGRESSING_NEW, seen(*old_pods(), failing), 3, policy=policy)
    assert d.target_revision == NEW
    assert d.status.phase == rollout.FAILED
    assert d.status.failed_revision == NEW and d.status.failed_reason == "CrashLoopBackOff"
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "RolloutFailed")]
    assert d.degraded.status == "True" and d.degraded.reason == "RolloutFailed"
    again = step(d.status, seen(*old_pods(), failing), 30, policy=policy)
    assert again.status == d.status and again.events == () and again.target_revision == NEW


def test_turning_auto_rollback_on_while_failed_rolls_back():
    policy = dataclasses.replace(POLICY, auto_rollback=False)
    failing = pod("new-0", created=1, waiting_reason="CrashLoopBackOff", restarts=2)
    failed = step(PROGRESSING_NEW, seen(*old_pods(), failing), 3, policy=policy).status
    d = step(failed, seen(*old_pods(), failing), 10)
    assert d.target_revision == OLD and d.status.phase == rollout.ROLLED_BACK
    assert reasons(d) == ["RolledBack"]


def test_a_failing_first_deploy_reports_no_good_revision_once_and_does_not_loop():
    first = step(RolloutStatus(), seen(revision=None), 0).status
    failing = pod("new-0", created=1, waiting_reason="ImagePullBackOff", message="not found")
    d = step(first, seen(failing), 2)
    assert d.target_revision == NEW
    assert d.status.phase == rollout.NO_GOOD_REVISION
    assert d.status.failed_revision == NEW and d.status.last_good_revision is None
    assert [(e.type, e.reason) for e in d.events] == [("Warning", "NoGoodRevision")]
    assert d.degraded.reason == "NoGoodRevision" and "no good revision" in d.degraded.message
    for seconds in (3, 100):
        again = step(d.status, seen(failing), seconds)
        assert again.target_revision == NEW and again.status == d.status and again.events == ()


def test_a_failed_first_deploy_whose_pods_later_all_settle_ready_recovers_as_last_good():
    first = step(RolloutStatus(), seen(revision=None), 0).status
    stuck = step(first, seen(pod("new-0", created=1, unschedulable=True)), 21).status
    ready = seen(pod("new-0", ready=True, created=1), pod("new-1", ready=True, created=1))
    d1 = step(stuck, ready, 100)
    assert d1.status.phase == rollout.NO_GOOD_REVISION and d1.requeue_after == pytest.approx(5)
    d2 = step(d1.status, ready, 105)
    assert d2.status.phase == rollout.HEALTHY and d2.status.last_good_revision == NEW
    assert reasons(d2) == ["RolloutRecovered"]


def test_a_revision_equal_to_the_last_good_one_never_rolls_back_to_itself():
    prior = dataclasses.replace(PROGRESSING_NEW, current_revision=OLD, last_good_revision=OLD)
    failing = pod("old-9", OLD, created=1, waiting_reason="ImagePullBackOff")
    d = step(prior, seen(failing, revision=OLD), 2, desired=OLD)
    assert d.target_revision == OLD
    assert d.status.phase == rollout.NO_GOOD_REVISION


@pytest.mark.parametrize("phase", [rollout.ROLLED_BACK, rollout.FAILED, rollout.NO_GOOD_REVISION])
def test_from_every_failed_phase_a_different_spec_starts_a_new_attempt(phase):
    prior = RolloutStatus(
        current_revision=OLD if phase == rollout.ROLLED_BACK else NEW,
        last_good_revision=None if phase == rollout.NO_GOOD_REVISION else OLD,
        failed_revision=NEW, failed_reason="CrashLoopBackOff", failed_message="pod new-0 ...",
        phase=phase, rollout_started="2026-03-01T12:00:00.000000Z",
    )
    d = step(prior, seen(*old_pods(), revision=prior.current_revision), 40, desired=NEWER)
    assert d.target_revision == NEWER
    assert (d.status.phase, d.status.current_revision, d.status.failed_revision) == (rollout.PROGRESSING, NEWER, None)
    assert d.status.last_good_revision == prior.last_good_revision
    assert reasons(d) == ["RolloutStarted"]


def test_a_failed_revision_left_in_place_that_settles_ready_after_all_becomes_last_good():
    policy = dataclasses.replace(POLICY, auto_rollback=False)
    failing = pod("new-0", created=1, unschedulable=True)
    failed = step(PROGRESSING_NEW, seen(*old_pods(), failing), 21, policy=policy).status
    assert failed.phase == rollout.FAILED
    ready = seen(pod("new-0", ready=True, created=1), pod("new-1", ready=True, created=25))
    d1 = step(failed, ready, 30, policy=policy)
    assert d1.status.phase == rollout.FAILED and d1.target_revision == NEW
    d2 = step(d1.status, ready, 35, policy=policy)
    assert d2.status.phase == rollout.HEALTHY and d2.status.last_good_revision == NEW
    assert d2.status.failed_revision is None and reasons(d2) == ["RolloutRecovered"]


def test_an_unknown_persisted_phase_is_treated_as_no_memory_and_starts_an_attempt():
    prior = dataclasses.replace(HEALTHY_OLD, phase="SomethingOld")
    d = step(prior, seen(*old_pods(), revision=OLD), 0, desired=OLD)
    assert d.status.phase == rollout.PROGRESSING and d.status.last_good_revision == OLD


# --------------------------------------------------------------------------- timers


def test_requeue_after_is_the_nearest_deadline_of_startup_budget_grace_and_progress_deadline():
    pods = (
        pod("new-0", created=1, phase="Running"),  # startup budget ends at 17
        pod("new-1", created=2, unschedulable=True),  # grace ends at 22
    )
    assert step(PROGRESSING_NEW, seen(*pods), 5).requeue_after == pytest.approx(12)
    assert step(PROGRESSING_NEW, seen(pods[1]), 5).requeue_after == pytest.approx(17)
    assert step(PROGRESSING_NEW, seen(), 5).requeue_after == pytest.approx(55)


def test_the_settle_deadline_wins_when_it_is_nearest():
    prior = dataclasses.replace(PROGRESSING_NEW, ready_since="2026-03-01T12:00:10.000000Z")
    d = step(prior, seen(pod("new-0", ready=True, created=1), pod("new-1", ready=True, created=2)), 12)
    assert d.requeue_after == pytest.approx(3)


def test_settled_rolled_back_and_failed_states_need_no_timer():
    assert step(rolled_back(), seen(*old_pods(), revision=OLD), 50).requeue_after is None


# --------------------------------------------------------------------------- restart safety


def test_the_persisted_status_round_trips_exactly():
    status = rolled_back()
    assert RolloutStatus.from_status(status.to_status()) == status
    assert RolloutStatus.from_status({"rollout": status.to_status(), "currentRevision": "x"}) == status
    assert RolloutStatus.from_status(None) == RolloutStatus()


def test_a_restarted_operator_deciding_from_the_persisted_status_reaches_the_same_rollback():
    failing = pod("new-0", created=1, phase="Running", started=at(2), ready_transition=at(1))
    early = step(PROGRESSING_NEW, seen(*old_pods(), failing), 6)
    assert early.status.phase == rollout.PROGRESSING
    # The operator dies; a new process reads the status back and decides at the deadline.
    reread = RolloutStatus.from_status({"rollout": early.status.to_status()})
    late = step(reread, seen(*old_pods(), failing), 17)
    uninterrupted = step(early.status, seen(*old_pods(), failing), 17)
    assert late == uninterrupted
    assert late.target_revision == OLD and late.status.failed_reason == "ReadinessTimeout"


def test_deciding_twice_on_the_same_snapshot_changes_nothing_the_second_time():
    d1 = step(PROGRESSING_NEW, seen(pod("new-0", ready=True), pod("new-1", ready=True)), 8)
    d2 = step(d1.status, seen(pod("new-0", ready=True), pod("new-1", ready=True)), 8)
    assert d2.status == d1.status and d2.events == ()
