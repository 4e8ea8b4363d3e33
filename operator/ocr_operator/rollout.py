"""The rollout state machine: progressing, healthy, failed, rolled back.

Pure: no kopf, no client, no clock of its own. The reconcile gathers one snapshot of what
Kubernetes reports (``Observed``), reads the persisted ``RolloutStatus`` from the OcrService
status, and calls ``decide``; the returned ``Decision`` says which revision's pod template to
apply to the Deployment, the new status to persist, the Events to emit, the Progressing and
Degraded conditions, and when to wake up again. Because every deadline is computed from
timestamps that live in the status or on the pods, calling ``decide`` again after an operator
restart gives the same answer.

Rules:

* A revision is the hash of the rendered pod template. Only pods of the revision being rolled
  out are judged; old pods and a replica-count change (HPA) never start or fail a rollout.
* A new revision fails when one of its pods reports, from Kubernetes: an image pull error,
  CreateContainerConfigError and friends, OOMKilled, CrashLoopBackOff or more than
  ``max_restarts`` restarts, Unschedulable for longer than ``unschedulable_grace_seconds``,
  readiness not reached within the startup budget (``model_load_timeout_seconds +
  failure_threshold * period_seconds``, counted from the pod's creation), or readiness lost
  after it was reached; or when the Deployment reports ProgressDeadlineExceeded; or, with
  spec.rollout.qualityGate, when the quality gate (quality.py) finds it reads worse than the last
  good revision (QualityRegression) or cannot get the golden pages answered (QualityGateError):
  the reconcile passes that verdict in (``gate_failure``), and the same rollback follows. A gated
  pod is not Ready before the gate passes, so its startup budget also holds the gate's time
  (``Policy.gate_seconds``).
* The last good revision, rolled out again (the spec went back to it), fails only for the
  image pull, container creation, Unschedulable and progress-deadline signals: its pods' restarts,
  OOM kills and readiness are what a running pod lives through (liveness restarting a wedged
  engine), not a fault of the revision that proved good. A settled revision (Healthy) is not
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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from .naming import GATE_CONDITION
from .naming import REVISION_KEY as REVISION_LABEL

PROGRESSING = "Progressing"
HEALTHY = "Healthy"
FAILED = "Failed"
ROLLED_BACK = "RolledBack"
NO_GOOD_REVISION = "NoGoodRevision"
PHASES = (PROGRESSING, HEALTHY, FAILED, ROLLED_BACK, NO_GOOD_REVISION)

# Container waiting reasons that mean the new revision cannot start, whatever the wait.
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull"})
CONFIG_ERROR_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})

# failed_reason values (CamelCase, stable; they name the cause in the status and the Event).
REASON_READINESS_TIMEOUT = "ReadinessTimeout"
REASON_READINESS_LOST = "ReadinessLost"
REASON_CRASH_LOOP = "CrashLoopBackOff"
REASON_TOO_MANY_RESTARTS = "TooManyRestarts"
REASON_OOM = "OOMKilled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_PROGRESS_DEADLINE = "ProgressDeadlineExceeded"
# A rollback refused: the last good revision's stored template cannot be trusted.
REASON_ROLLBACK_REFUSED = "RollbackRefused"


# --------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class PodView:
    """What Kubernetes reports about one pod, reduced to what the state machine judges.

    ``ready_transition`` is the lastTransitionTime of the pod's Ready condition and
    ``started`` the time its container last started running (the pod's startTime when no
    container runs now). The Ready condition is False from the pod's first status on and only
    transitions by becoming True, so a pod that is not Ready and whose Ready condition turned
    False after it started had been Ready and lost it.
    """

    name: str
    revision: str | None
    phase: str
    ready: bool
    ready_transition: datetime | None
    created: datetime
    restarts: int = 0
    waiting_reason: str | None = None
    last_terminated_reason: str | None = None
    unschedulable: bool = False
    message: str = ""
    deleting: bool = False
    started: datetime | None = None
    # The quality gate (quality.py): containers Ready, held back only by the readiness gate.
    awaiting_gate: bool = False
    ip: str | None = None


@dataclass(frozen=True)
class Observed:
    """One snapshot of the Deployment and its pods (all revisions)."""

    deployment_revision: str | None
    desired_replicas: int
    progress_deadline_exceeded: bool
    pods: tuple[PodView, ...] = ()
    # The Deployment's own count of Ready pods (None: not known). The pods and the Deployment
    # come on separate watch streams; the settle period starts only once both say Ready.
    deployment_ready_replicas: int | None = None


@dataclass(frozen=True)
class Policy:
    failure_threshold: int = 5
    period_seconds: int = 10
    model_load_timeout_seconds: int = 600
    progress_deadline_seconds: int = 900
    auto_rollback: bool = True
    settle_seconds: int = 30
    max_restarts: int = 3
    unschedulable_grace_seconds: int = 120
    gate_seconds: float = 0.0  # the quality gate's time on a new pod (quality.budget_seconds)

    @property
    def startup_budget_seconds(self) -> float:
        """How long a new pod may take to become Ready, counted from its creation."""
        return float(self.model_load_timeout_seconds + self.failure_threshold * self.period_seconds
                     + self.gate_seconds)


# --------------------------------------------------------------------------- status


def _iso(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    """Kubernetes timestamp ('2026-01-02T03:04:05Z', with or without fraction) -> aware datetime."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    text = str(value)
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class RolloutStatus:
    """The rollout's memory; persisted in the OcrService status so it survives restarts.

    ``rollout_started`` and ``ready_since`` are ISO-8601 strings, exactly as persisted, so a
    status read back compares equal to the one written (no write on a no-op reconcile).
    """

    current_revision: str | None = None
    last_good_revision: str | None = None
    failed_revision: str | None = None
    failed_reason: str | None = None
    failed_message: str | None = None
    phase: str | None = None
    rollout_started: str | None = None
    ready_since: str | None = None

    # Keys of the persisted record, ``status.rollout`` of the OcrService (free-form in the CRD).
    _KEYS = (
        ("current_revision", "currentRevision"),
        ("last_good_revision", "lastGoodRevision"),
        ("failed_revision", "failedRevision"),
        ("failed_reason", "failedReason"),
        ("failed_message", "failedMessage"),
        ("phase", "phase"),
        ("rollout_started", "startedAt"),
        ("ready_since", "readySince"),
    )

    def to_status(self) -> dict[str, Any]:
        """The record for ``status.rollout``; unset fields are None so a merge patch clears them."""
        return {key: getattr(self, attr) for attr, key in self._KEYS}

    def summary(self) -> dict[str, Any]:
        """The top-level status fields users read (printer columns): revisions and the failure."""
        return {
            "currentRevision": self.current_revision,
            "lastGoodRevision": self.last_good_revision,
            "failedRevision": self.failed_revision,
            "failedReason": self.failed_reason,
            "failedMessage": self.failed_message,
        }

    @classmethod
    def from_status(cls, status: Mapping[str, Any] | None) -> "RolloutStatus":
        """Read the record back: either ``status.rollout`` itself or the whole ``status``."""
        status = status or {}
        record = status.get("rollout")
        if isinstance(record, Mapping):
            status = record
        values = {}
        for attr, key in cls._KEYS:
            value = status.get(key)
            values[attr] = None if value in (None, "") else str(value)
        return cls(**values)

    @property
    def started_at(self) -> datetime | None:
        return parse_time(self.rollout_started)

    @property
    def ready_at(self) -> datetime | None:
        return parse_time(self.ready_since)


# --------------------------------------------------------------------------- outputs


@dataclass(frozen=True)
class EventSpec:
    type: str  # 'Normal' | 'Warning'
    reason: str
    message: str


@dataclass(frozen=True)
class ConditionSpec:
    type: str
    status: str  # 'True' | 'False'
    reason: str
    message: str


@dataclass(frozen=True)
class Failure:
    """The first failure signal found: the reason, a message naming the pod, and when."""

    reason: str
    message: str
    pod: str | None = None


@dataclass(frozen=True)
class Decision:
    target_revision: str
    status: RolloutStatus
    events: tuple[EventSpec, ...] = ()
    requeue_after: float | None = None
    progressing: ConditionSpec = field(default=None)  # type: ignore[assignment]
    degraded: ConditionSpec = field(default=None)  # type: ignore[assignment]

    @property
    def conditions(self) -> tuple[ConditionSpec, ConditionSpec]:
        return (self.progressing, self.degraded)


# --------------------------------------------------------------------------- judging pods


def _pod_failure(pod: PodView, policy: Policy, now: datetime, prior: RolloutStatus,
                 proven: bool = False) -> Failure | None:
    """The failure one pod of the new revision reports, or None. A `proven` revision (the last
    good one) fails only for what its template cannot do: pull its image, create its container,
    get scheduled."""
    where = f"pod {pod.name}"
    detail = f": {pod.message}" if pod.message else ""
    waiting = pod.waiting_reason
    if waiting in IMAGE_PULL_REASONS:
        return Failure(waiting, f"{where} cannot pull its image ({waiting}){detail}", pod.name)
    if waiting in CONFIG_ERROR_REASONS:
        return Failure(waiting, f"{where} cannot create its container ({waiting}){detail}", pod.name)
    if proven and not pod.unschedulable:
        return None  # restarts, OOM kills and readiness: a proven revision's pods are not judged on them
    if pod.last_terminated_reason == REASON_OOM:
        return Failure(REASON_OOM, f"{where} was OOMKilled (restarts: {pod.restarts}){detail}", pod.name)
    if waiting == REASON_CRASH_LOOP:
        return Failure(REASON_CRASH_LOOP, f"{where} is in CrashLoopBackOff (restarts: {pod.restarts}){detail}", pod.name)
    if pod.restarts > policy.max_restarts:
        return Failure(
            REASON_TOO_MANY_RESTARTS,
            f"{where} restarted {pod.restarts} times (more than {policy.max_restarts}){detail}",
            pod.name,
        )
    if pod.unschedulable:
        if _age(pod, now) >= policy.unschedulable_grace_seconds:
            return Failure(
                REASON_UNSCHEDULABLE,
                f"{where} is Unschedulable for {_age(pod, now):.0f}s{detail}",
                pod.name,
            )
        return None  # its startup clock has not started: it is waiting for a node
    if pod.ready:
        return None
    if _lost_readiness(pod, prior):
        return Failure(
            REASON_READINESS_LOST,
            f"{where} lost readiness after being Ready ({policy.failure_threshold} failed health checks){detail}",
            pod.name,
        )
    if _age(pod, now) >= policy.startup_budget_seconds:
        return Failure(
            REASON_READINESS_TIMEOUT,
            f"{where} not Ready within {policy.startup_budget_seconds:.0f}s "
            f"(modelLoadTimeoutSeconds {policy.model_load_timeout_seconds} + "
            f"{policy.failure_threshold} x {policy.period_seconds}s health checks"
            + (f" + {policy.gate_seconds:.0f}s quality gate" if policy.gate_seconds else "") + f"){detail}",
            pod.name,
        )
    return None


def _lost_readiness(pod: PodView, prior: RolloutStatus) -> bool:
    """A NotReady pod that had been Ready: its Ready condition turned False after the container
    started, or it was created in a second before every desired pod was Ready (prior.ready_since)."""
    if pod.ready:
        return False
    if pod.started is not None and pod.ready_transition is not None and pod.ready_transition > pod.started:
        return True
    ready_at = prior.ready_at
    # creationTimestamp has whole seconds, readySince microseconds: a pod created in the same
    # second may have come after it (an HPA scale-up right then), so it must be an earlier second.
    return ready_at is not None and pod.created < ready_at.replace(microsecond=0)


def _age(pod: PodView, now: datetime) -> float:
    return (now - pod.created).total_seconds()


def _pod_deadline(pod: PodView, policy: Policy, now: datetime) -> float | None:
    """Seconds until this (healthy so far) pod's next deadline: unschedulable grace or startup budget."""
    if pod.ready:
        return None
    limit = policy.unschedulable_grace_seconds if pod.unschedulable else policy.startup_budget_seconds
    return limit - _age(pod, now)


def find_failure(
    revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime
) -> Failure | None:
    """The first failure of ``revision``: pods in creation order, then the progress deadline.

    The last good revision proved that it starts and serves: its pods' restarts, OOM kills and
    readiness (a liveness restart of a wedged engine, a pod still restarting when the spec goes
    back to it) are the kubelet's to handle, never a failure of that revision."""
    proven = revision == prior.last_good_revision
    pods = sorted(
        (p for p in observed.pods if p.revision == revision and not p.deleting),
        key=lambda p: (p.created, p.name),
    )
    for pod in pods:
        failure = _pod_failure(pod, policy, now, prior, proven)
        if failure is not None:
            return failure
    started = prior.started_at
    if (
        observed.progress_deadline_exceeded
        and observed.deployment_revision == revision
        and (started is None or (now - started).total_seconds() >= policy.progress_deadline_seconds)
    ):
        ready = sum(1 for p in pods if p.ready)
        return Failure(
            REASON_PROGRESS_DEADLINE,
            f"Deployment reports ProgressDeadlineExceeded after {policy.progress_deadline_seconds}s "
            f"({ready}/{observed.desired_replicas} pods of the new revision Ready)",
        )
    return None


def _all_ready(revision: str, observed: Observed) -> tuple[int, bool]:
    ready = sum(1 for p in observed.pods if p.revision == revision and p.ready and not p.deleting)
    return ready, observed.deployment_revision == revision and ready >= observed.desired_replicas


# --------------------------------------------------------------------------- decide


def _conditions(status: RolloutStatus, observed: Observed, ready: int) -> tuple[ConditionSpec, ConditionSpec]:
    phase = status.phase
    rev = status.current_revision
    failed = f"revision {status.failed_revision} failed ({status.failed_reason}: {status.failed_message})"
    if phase == PROGRESSING:
        progressing = ConditionSpec(
            "Progressing",
            "True",
            "RolloutInProgress",
            f"rolling out revision {rev}: {ready}/{observed.desired_replicas} pods Ready"
            + (f"; last good revision {status.last_good_revision}" if status.last_good_revision else ""),
        )
        degraded = ConditionSpec("Degraded", "False", "AsExpected", "no failed revision")
    elif phase == HEALTHY:
        progressing = ConditionSpec("Progressing", "False", "RolloutComplete", f"revision {rev} is Ready and settled")
        degraded = ConditionSpec("Degraded", "False", "AsExpected", "no failed revision")
    elif phase == ROLLED_BACK:
        progressing = ConditionSpec(
            "Progressing", "False", "RolledBack", f"rolled back to revision {status.last_good_revision}"
        )
        degraded = ConditionSpec(
            "Degraded",
            "True",
            "RolledBack",
            f"{failed}; rolled back to revision {status.last_good_revision}; "
            "it is not retried until the spec changes",
        )
    elif phase == FAILED:
        progressing = ConditionSpec("Progressing", "False", "RolloutFailed", f"revision {rev} failed")
        degraded = ConditionSpec(
            "Degraded",
            "True",
            "RolloutFailed",
            f"{failed}; autoRollback is off, the failed revision stays in place"
            + (f" (last good revision {status.last_good_revision})" if status.last_good_revision else ""),
        )
    else:  # NO_GOOD_REVISION
        progressing = ConditionSpec("Progressing", "False", NO_GOOD_REVISION, f"revision {rev} failed")
        degraded = ConditionSpec(
            "Degraded",
            "True",
            NO_GOOD_REVISION,
            f"{failed}; there is no good revision to roll back to; fix the spec to try again",
        )
    return progressing, degraded


def _finish(
    target: str,
    status: RolloutStatus,
    observed: Observed,
    events: Iterable[EventSpec] = (),
    requeue_after: float | None = None,
) -> Decision:
    ready, _ = _all_ready(status.current_revision or target, observed)
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
    _, all_ready = _all_ready(revision, observed)
    reported = observed.deployment_ready_replicas
    if not all_ready or (reported is not None and reported < observed.desired_replicas):
        return replace(status, ready_since=None), False, None
    since = status.ready_at
    if since is None:
        status = replace(status, ready_since=_iso(now))
        since = now
    left = policy.settle_seconds - (now - since).total_seconds()
    return status, left <= 0, (left if left > 0 else None)


def decide(
    desired_revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime,
    gate_failure: Failure | None = None,
) -> Decision:
    """One step of the state machine; see the module docstring for the rules. `gate_failure`:
    the quality gate's verdict against the revision being rolled out (prior.current_revision)."""
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
            rollout_started=_iso(now),
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
    return replace(decide(stays, prior, observed, policy, now), progressing=progressing)


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
    _, all_ready = _all_ready(revision, observed)
    return all_ready and find_failure(revision, prior, observed, policy, now) is None


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
            deadlines.append(_pod_deadline(pod, policy, now))
    started = status.started_at
    if started is not None:
        deadlines.append(policy.progress_deadline_seconds - (now - started).total_seconds())
    pending = [d for d in deadlines if d is not None and d > 0]
    return _finish(revision, status, observed, (), min(pending) if pending else None)


def _fail(
    revision: str, prior: RolloutStatus, failure: Failure, observed: Observed, policy: Policy
) -> Decision:
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
        event = EventSpec(
            "Warning",
            "RolledBack",
            f"revision {revision} failed: {failure.reason}: {failure.message}; "
            f"rolled back to revision {last_good}",
        )
        return _finish(last_good, status, observed, (event,))
    if last_good and last_good != revision:
        status = replace(failed, phase=FAILED)
        event = EventSpec(
            "Warning",
            "RolloutFailed",
            f"revision {revision} failed: {failure.reason}: {failure.message}; "
            f"autoRollback is off, it stays in place (last good revision {last_good})",
        )
        return _finish(revision, status, observed, (event,))
    status = replace(failed, phase=NO_GOOD_REVISION)
    event = EventSpec(
        "Warning",
        NO_GOOD_REVISION,
        f"revision {revision} failed: {failure.reason}: {failure.message}; "
        "there is no good revision to roll back to",
    )
    return _finish(revision, status, observed, (event,))


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


# --------------------------------------------------------------------------- snapshot helpers


def pod_view(pod: Mapping[str, Any], container: str | None = None) -> PodView:
    """Reduce a Pod (as a dict, camelCase like the API returns) to a PodView.

    ``container`` names the container to judge; default: the worst of all containers.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready_cond = conditions.get("Ready") or {}
    sched = conditions.get("PodScheduled") or {}
    statuses = list(status.get("containerStatuses") or [])
    if container is not None:
        statuses = [s for s in statuses if s.get("name") == container] or statuses
    restarts = 0
    waiting_reason = waiting_message = None
    terminated_reason = None
    started: datetime | None = None
    for cs in statuses:
        restarts = max(restarts, int(cs.get("restartCount") or 0))
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        reason = waiting.get("reason")
        if reason and reason not in ("ContainerCreating", "PodInitializing") and waiting_reason is None:
            waiting_reason, waiting_message = reason, waiting.get("message") or ""
        last = (cs.get("lastState") or {}).get("terminated") or {}
        current = state.get("terminated") or {}
        for term in (current, last):
            if term.get("reason") and terminated_reason != "OOMKilled":
                terminated_reason = term.get("reason")
        running = state.get("running") or {}
        when = parse_time(running.get("startedAt"))
        if when is not None and (started is None or when > started):
            started = when
    if started is None:
        started = parse_time(status.get("startTime"))
    unschedulable = sched.get("status") == "False" and sched.get("reason") == "Unschedulable"
    containers_ready = (conditions.get("ContainersReady") or {}).get("status") == "True"
    gate = (conditions.get(GATE_CONDITION) or {}).get("status")
    awaiting_gate = (containers_ready and ready_cond.get("status") == "False"
                     and ready_cond.get("reason") == "ReadinessGatesNotReady" and gate != "True")
    if waiting_message:
        message = waiting_message
    elif unschedulable:
        message = sched.get("message") or ""
    else:
        message = ready_cond.get("message") or ""
    created = parse_time(meta.get("creationTimestamp")) or datetime.fromtimestamp(0, timezone.utc)
    return PodView(
        name=meta.get("name", ""),
        revision=(meta.get("labels") or {}).get(REVISION_LABEL),
        phase=status.get("phase") or "Pending",
        ready=ready_cond.get("status") == "True",
        ready_transition=parse_time(ready_cond.get("lastTransitionTime")),
        created=created,
        restarts=restarts,
        waiting_reason=waiting_reason,
        last_terminated_reason=terminated_reason,
        unschedulable=unschedulable,
        message=message,
        deleting=bool(meta.get("deletionTimestamp")),
        started=started,
        awaiting_gate=awaiting_gate,
        ip=status.get("podIP") or None,
    )


def summarize(deployment: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> Observed:
    """What the state machine reads of the live Deployment and its pods (dicts, camelCase)."""
    deployment = deployment or {}
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    progressing = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "Progressing"), {}
    )
    replicas = spec.get("replicas")
    return Observed(
        deployment_revision=(meta.get("annotations") or {}).get(REVISION_LABEL),
        desired_replicas=int(replicas if replicas is not None else 1),
        progress_deadline_exceeded=progressing.get("status") == "False"
        and progressing.get("reason") == "ProgressDeadlineExceeded",
        pods=tuple(pod_view(p) for p in pods),
        deployment_ready_replicas=int(status.get("readyReplicas") or 0) if deployment else None,
    )
