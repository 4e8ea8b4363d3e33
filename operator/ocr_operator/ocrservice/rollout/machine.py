"""The rollout state machine: progressing, healthy, failed, rolled back (the revisions' states;
the quality gate's states are gate.py's, and decide.py joins both).

Pure: no kopf, no client, no clock of its own. The reconcile gathers one snapshot of what
Kubernetes reports (``Observed``), reads the persisted ``RolloutStatus`` from the OcrService
status, and ``advance`` (called by decide.decide) returns a ``Decision``: which revision's pod
template to apply to the Deployment, the new status to persist, the Events to emit, the
Progressing and Degraded conditions, and when to wake up again. Because every deadline is
computed from timestamps that live in the status or on the pods, deciding again after an
operator restart gives the same answer.

Rules:

* A revision is the hash of the rendered pod template. Only pods of the revision being rolled
  out are judged; old pods and a replica-count change (HPA) never start or fail a rollout.
* A new revision fails when one of its pods reports, from Kubernetes: an image pull error,
  CreateContainerConfigError and friends, OOMKilled, CrashLoopBackOff or more than
  ``max_restarts`` restarts, Unschedulable for longer than ``unschedulable_grace_seconds`` (or
  pods the Deployment cannot create, FailedCreate: a ResourceQuota, a missing RuntimeClass,
  admission, for as long), readiness not reached within the startup budget
  (``model_load_timeout_seconds + failure_threshold * period_seconds``, counted from the pod's
  creation), or readiness lost
  after it was reached (for a second at least: a shorter NotReady is a blip of the kubelet's
  status sync, never a probe's verdict); or when the Deployment reports
  ProgressDeadlineExceeded; or, with spec.rollout.qualityGate, when the quality gate (gate.py)
  finds it reads worse than the last good revision (QualityRegression) or cannot get the golden
  pages answered (QualityGateError): decide.py passes that verdict in (``gate_failure``), and
  the same rollback follows. A gated pod is not Ready before the gate passes, so its startup
  budget also holds the gate's time (``Policy.gate_seconds``).
* The last good revision, rolled out again (the spec went back to it), fails only for the
  image pull, container creation, Unschedulable, FailedCreate and progress-deadline signals: its
  pods' restarts, OOM kills and readiness are what a running pod lives through (liveness
  restarting a wedged engine), not a fault of the revision that proved good. A settled revision (Healthy) is not
  judged at all.
* It becomes the last good revision when all desired pods of it are Ready and stay Ready for
  ``settle_seconds``, or, if the spec changes before that, when it was *Ready at the change*:
  all its desired pods were Ready in the reconcile before the change (``ready_since`` set) and
  are still Ready, with no failure signal, in the snapshot where the new revision is first seen.
  Scripts that apply twice in a row then still have a revision to roll back to. The flap
  protection stays: a pod that loses readiness clears ``ready_since`` (or fails the revision
  with ReadinessLost), so a flapping revision is never Ready at the change.
* On failure, with a last good revision and ``auto_rollback``: target the last good revision,
  phase RolledBack, failed_revision set with reason and message, one Warning event. While the
  desired revision equals the failed one the target stays the last good one: no
  upgrade/rollback loop. A different desired revision starts a new attempt.
* ``auto_rollback`` false: phase Failed, the failed revision stays applied and is reported.
* No last good revision (the first deploy fails): phase NoGoodRevision, reported once, the
  revision stays applied, nothing is retried.
* Failure is sticky (a persisted flag cleared only by a new pod template, as Argo Rollouts'
  resetRolloutStatus). A failed revision that stays applied (Failed, NoGoodRevision) and later
  has all its pods Ready for the settle period is recorded as recovered and becomes last good;
  turning ``auto_rollback`` on while Failed rolls back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timezone

from .model import (FAILED, HEALTHY, NO_GOOD_REVISION, PHASES, PROGRESSING, REASON_ROLLBACK_REFUSED, ROLLED_BACK,
                    ConditionSpec, Decision, EventSpec, Failure, Observed, Policy, RolloutStatus, iso_micro)
from .pods import all_ready, create_failure_deadline, pod_deadline, find_failure


def _conditions(status: RolloutStatus, observed: Observed, ready: int) -> tuple[ConditionSpec, ConditionSpec]:
    """Progressing and Degraded for the phase: (status, reason, message) of each."""
    phase, rev, last_good = status.phase, status.current_revision, status.last_good_revision
    failed = f"revision {status.failed_revision} failed ({status.failed_reason}: {status.failed_message})"
    fine = ("False", "AsExpected", "no failed revision")
    if phase == PROGRESSING:
        refused = (f"; the Deployment cannot create its pods: {observed.create_failure[0]}"
                   if observed.create_failure and observed.deployment_revision == rev else "")
        progressing = ("True", "RolloutInProgress", f"rolling out revision {rev}: {ready}/{observed.desired_replicas} "
                       "pods Ready" + (f"; last good revision {last_good}" if last_good else "") + refused)
        degraded = fine
    elif phase == HEALTHY:
        progressing, degraded = ("False", "RolloutComplete", f"revision {rev} is Ready and settled"), fine
    elif phase == ROLLED_BACK:
        progressing = ("False", "RolledBack", f"rolled back to revision {last_good}")
        degraded = ("True", "RolledBack", f"{failed}; rolled back to revision {last_good}; "
                    "it is not retried until the spec changes")
    elif phase == FAILED:
        progressing = ("False", "RolloutFailed", f"revision {rev} failed")
        degraded = ("True", "RolloutFailed", f"{failed}; autoRollback is off, the failed revision stays in place"
                    + (f" (last good revision {last_good})" if last_good else ""))
    else:  # NO_GOOD_REVISION
        progressing = ("False", NO_GOOD_REVISION, f"revision {rev} failed")
        degraded = ("True", NO_GOOD_REVISION, f"{failed}; there is no good revision to roll back to; "
                    "fix the spec to try again")
    return ConditionSpec("Progressing", *progressing), ConditionSpec("Degraded", *degraded)


def _finish(
    target: str,
    status: RolloutStatus,
    observed: Observed,
    events: Iterable[EventSpec] = (),
    requeue_after: float | None = None,
) -> Decision:
    ready, _ = all_ready(status.current_revision or target, observed)
    progressing, degraded = _conditions(status, observed, ready)
    if requeue_after is not None:
        requeue_after = max(0.05, requeue_after)
    return Decision(target, status, tuple(events), requeue_after, progressing, degraded)


def _promote(revision: str, status: RolloutStatus, observed: Observed, reason: str, message: str) -> Decision:
    """The revision has settled: it becomes the last good one, told by one Normal Event."""
    return _finish(revision, _mark_good(status, revision), observed, (EventSpec("Normal", reason, message),))


def _mark_good(status: RolloutStatus, revision: str) -> RolloutStatus:
    """`revision` settled: it is the last good one and no failure is pending any more."""
    return replace(status, phase=HEALTHY, last_good_revision=revision, failed_revision=None,
                   failed_reason=None, failed_message=None)


def _settle(
    revision: str, status: RolloutStatus, observed: Observed, policy: Policy, now: datetime
) -> tuple[RolloutStatus, bool, float | None]:
    """Track how long every desired pod of ``revision`` has been Ready, in the pods' own
    reports and in the Deployment's count (both, so Ready and the settle start together).

    Returns the status with ready_since kept, set or cleared, whether the settle period is
    over, and the seconds left until it is.
    """
    _, every_pod_ready = all_ready(revision, observed)
    reported = observed.deployment_ready_replicas
    if not every_pod_ready or (reported is not None and reported < observed.desired_replicas):
        return replace(status, ready_since=None), False, None
    since = status.ready_at
    if since is None:
        status = replace(status, ready_since=iso_micro(now))
        since = now
    left = policy.settle_seconds - (now - since).total_seconds()
    return status, left <= 0, (left if left > 0 else None)


def advance(
    desired_revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime,
    gate_failure: Failure | None = None,
) -> Decision:
    """One step of the revisions' state machine; see the module docstring for the rules.
    `gate_failure`: the quality gate's verdict against the revision being rolled out
    (prior.current_revision)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    phase = prior.phase if prior.phase in PHASES else None

    # The failed revision is not retried while the spec still renders it.
    if phase in (ROLLED_BACK, FAILED, NO_GOOD_REVISION) and desired_revision == prior.failed_revision:
        return _stay_failed(desired_revision, prior, observed, policy, now)

    # A new pod template (or no memory at all): a new attempt; failure flags are cleared.
    if phase is None or desired_revision != prior.current_revision or phase in (ROLLED_BACK, FAILED, NO_GOOD_REVISION):
        events: tuple[EventSpec, ...] = ()
        last_good = prior.last_good_revision
        if phase == PROGRESSING and ready_at_change(prior, observed, policy, now):
            last_good = prior.current_revision
            events = (EventSpec(
                "Normal",
                "RolloutSucceeded",
                f"revision {last_good} was Ready on {observed.desired_replicas} pods when the spec changed: "
                "it is the last good revision",
            ),)
        started = RolloutStatus(
            current_revision=desired_revision,
            last_good_revision=last_good,
            phase=PROGRESSING,
            rollout_started=iso_micro(now),
        )
        events += (EventSpec(
            "Normal",
            "RolloutStarted",
            f"rolling out revision {desired_revision}"
            + (f" (last good revision {last_good})" if last_good else ""),
        ),)
        # Judge the snapshot at once: pods of this revision may already exist (an adopted
        # Deployment, or the user went back to the last good spec).
        following = _progress(desired_revision, started, observed, policy, now)
        return replace(following, events=events + following.events)

    if phase == HEALTHY:
        # Settled: pods coming and going (HPA, node loss) are the Deployment's business.
        return _finish(desired_revision, prior, observed)

    return _progress(desired_revision, prior, observed, policy, now, gate_failure)


def hold(desired_revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime,
         reason: str, message: str) -> Decision:
    """`desired_revision` may not start rolling out (the quality gate's golden pages cannot be
    used): what runs stays as it is, judged as before, and Progressing says why the new revision
    waits. Without any revision yet (the first deploy) nothing is rolled out at all."""
    why = f"revision {desired_revision} is not rolled out: {message}"
    progressing = ConditionSpec("Progressing", "False", reason, why)
    if prior.current_revision is None:
        return Decision(desired_revision, prior, (), None, progressing, ConditionSpec("Degraded", "True", reason, why))
    stays = prior.failed_revision if prior.phase in (ROLLED_BACK, FAILED, NO_GOOD_REVISION) and prior.failed_revision \
        else prior.current_revision
    return replace(advance(stays, prior, observed, policy, now), progressing=progressing)


def ready_at_change(prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime) -> bool:
    """Whether the revision being rolled out (not yet settled) was Ready when the spec changed.

    All its desired pods were Ready at the previous reconcile (``ready_since`` is set only then
    and cleared as soon as one is not) and still are in this snapshot, the Deployment still
    runs it, and none of its pods reports a failure. Such a revision served all its traffic
    when the user moved on, so it is a valid rollback target even inside ``settle_seconds``.
    """
    revision = prior.current_revision
    if revision is None or revision == prior.last_good_revision or prior.ready_at is None:
        return False
    _, every_pod_ready = all_ready(revision, observed)
    return every_pod_ready and find_failure(revision, prior, observed, policy, now) is None


def _progress(
    revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime,
    gate_failure: Failure | None = None,
) -> Decision:
    """Phase Progressing: fail, settle, or wait for the next deadline."""
    failure = find_failure(revision, prior, observed, policy, now) or gate_failure
    if failure is not None:
        return _fail(revision, prior, failure, observed, policy)

    status, settled, settle_left = _settle(revision, prior, observed, policy, now)
    if settled:
        return _promote(revision, status, observed, "RolloutSucceeded",
                        f"revision {revision} is Ready on {observed.desired_replicas} pods for "
                        f"{policy.settle_seconds}s: it is the last good revision")

    deadlines = [settle_left]
    for pod in observed.pods:
        if pod.revision == revision and not pod.deleting:
            deadlines.append(pod_deadline(pod, policy, now, prior))
    started = status.started_at
    deadlines.append(create_failure_deadline(revision, observed, policy, now, started))
    if started is not None:
        deadlines.append(policy.progress_deadline_seconds - (now - started).total_seconds())
    pending = [d for d in deadlines if d is not None and d > 0]
    return _finish(revision, status, observed, (), min(pending) if pending else None)


def _fail(
    revision: str, prior: RolloutStatus, failure: Failure, observed: Observed, policy: Policy
) -> Decision:
    """The revision failed: rolled back to the last good one (auto_rollback), left in place
    (Failed), or, without a good revision, NoGoodRevision; one Warning Event says which."""
    last_good = prior.last_good_revision
    failed = replace(
        prior,
        failed_revision=revision,
        failed_reason=failure.reason,
        failed_message=failure.message,
        ready_since=None,
    )
    if last_good and last_good != revision and policy.auto_rollback:
        status = replace(failed, phase=ROLLED_BACK, current_revision=last_good)
        target, reason, then = last_good, "RolledBack", f"rolled back to revision {last_good}"
    elif last_good and last_good != revision:
        status = replace(failed, phase=FAILED)
        target, reason = revision, "RolloutFailed"
        then = f"autoRollback is off, it stays in place (last good revision {last_good})"
    else:
        status = replace(failed, phase=NO_GOOD_REVISION)
        target, reason, then = revision, NO_GOOD_REVISION, "there is no good revision to roll back to"
    event = EventSpec("Warning", reason, f"revision {revision} failed: {failure.reason}: {failure.message}; {then}")
    return _finish(target, status, observed, (event,))


def refuse_rollback(decision: Decision, desired_revision: str, why: str, observed: Observed) -> Decision:
    """A rollback whose target has no template the operator can trust (lost from the history,
    or stored with a hash that does not match it): nothing is rolled back. The failed revision
    stays applied and failed, the phase is NoGoodRevision (so later reconciles do not try the
    rollback again), the failed message says why, and one Warning Event tells it."""
    target = decision.target_revision
    status = replace(decision.status, phase=NO_GOOD_REVISION, current_revision=desired_revision,
                     failed_revision=decision.status.failed_revision or desired_revision,
                     failed_message=f"{decision.status.failed_message or 'failed'}; "
                                    f"rollback to revision {target} refused: {why}")
    events = tuple(e for e in decision.events if e.reason != "RolledBack")
    event = EventSpec("Warning", REASON_ROLLBACK_REFUSED,
                      f"revision {status.failed_revision} failed ({status.failed_reason}); rollback to revision "
                      f"{target} refused: {why}; the failed revision stays in place")
    return _finish(desired_revision, status, observed, events + (event,))


def _stay_failed(
    desired: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime
) -> Decision:
    """desired == failed_revision: never retried. RolledBack keeps the last good template."""
    if prior.phase == ROLLED_BACK:
        return _finish(prior.last_good_revision or desired, prior, observed)
    if prior.phase == FAILED and policy.auto_rollback and prior.last_good_revision:
        # autoRollback was turned on while the failed revision was in place.
        status = replace(prior, phase=ROLLED_BACK, current_revision=prior.last_good_revision, ready_since=None)
        event = EventSpec(
            "Warning",
            "RolledBack",
            f"revision {desired} failed: {prior.failed_reason}: {prior.failed_message}; "
            f"rolled back to revision {prior.last_good_revision}",
        )
        return _finish(prior.last_good_revision, status, observed, (event,))
    # Failed / NoGoodRevision: the failed revision stays applied. If its pods all become Ready
    # and stay Ready (a node with GPUs joined, an image got pushed), it has recovered.
    status, settled, settle_left = _settle(desired, prior, observed, policy, now)
    if settled:
        return _promote(desired, status, observed, "RolloutRecovered",
                        f"revision {desired} failed earlier ({prior.failed_reason}) but is now Ready on "
                        f"{observed.desired_replicas} pods for {policy.settle_seconds}s: it is the last good revision")
    return _finish(desired, status, observed, (), settle_left)
