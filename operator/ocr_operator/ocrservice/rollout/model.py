"""The rollout state machine's vocabulary: phases and failure reasons, what it reads (PodView,
Observed, Policy, the persisted RolloutStatus) and what it answers (Decision). Pure data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ocr_limits import timestamps

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
# The Deployment cannot create the revision's pods (its ReplicaFailure condition, reason FailedCreate):
# a ResourceQuota, a missing RuntimeClass or ServiceAccount, Pod Security admission refusing them.
REASON_FAILED_CREATE = "FailedCreate"
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
    # The quality gate (gate.py): containers Ready, held back only by the readiness gate.
    awaiting_gate: bool = False
    ip: str | None = None
    # spec.model.source.s3's init container (fetching.py): running, or its failure (reason, message).
    fetching: bool = False
    fetch_failure: tuple[str, str] | None = None


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
    # The Deployment's ReplicaFailure condition while it is True with reason FailedCreate: the
    # API server's refusal of a pod (message) and since when (its lastTransitionTime).
    create_failure: tuple[str, datetime] | None = None


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
    gate_seconds: float = 0.0  # the quality gate's time on a new pod (gate.budget_seconds)
    fetch_seconds: float = 0.0  # the model-fetch init container's bound (spec.model.source.s3), before the server starts

    @property
    def startup_budget_seconds(self) -> float:
        """How long a new pod may take to become Ready, counted from its creation."""
        return float(self.model_load_timeout_seconds + self.failure_threshold * self.period_seconds
                     + self.gate_seconds + self.fetch_seconds)


# --------------------------------------------------------------------------- status


def iso_micro(value: datetime | None) -> str | None:
    return None if value is None else timestamps.iso_micro(value)


parse_time = timestamps.parse  # Kubernetes timestamp -> aware datetime (None stays None)


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
    # The full sha256 of current_revision's and last_good_revision's pod templates (naming.
    # template_digest): the status is written by the operator only, unlike the revision history's
    # ConfigMap, so a rollback checks the stored template against these (with_digests).
    current_digest: str | None = None
    last_good_digest: str | None = None

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
        ("current_digest", "currentDigest"),
        ("last_good_digest", "lastGoodDigest"),
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

    def digests(self) -> dict[str, str]:
        """revision -> full digest of the revisions this status records one for (a digest that
        does not begin with its revision is no digest of it and is left out)."""
        pairs = ((self.current_revision, self.current_digest), (self.last_good_revision, self.last_good_digest))
        return {rev: digest for rev, digest in pairs if rev and digest and digest.startswith(rev)}

    def with_digests(self, known: Mapping[str, str]) -> "RolloutStatus":
        """This status with the digests of its current and last good revisions taken from `known`
        (revision -> digest: the prior status' own and the one just rendered). The state machine
        moves revisions between current and last good; the digests follow them here, never
        from the history a rollback reads."""
        return replace(self, current_digest=known.get(self.current_revision or ""),
                       last_good_digest=known.get(self.last_good_revision or ""))

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
