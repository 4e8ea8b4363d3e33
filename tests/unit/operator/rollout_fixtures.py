"""Shared vocabulary of the rollout state machine's tests: a policy, a clock, pods and snapshots."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import Decision, Observed, PodView, Policy, RolloutStatus
from ocr_operator.ocrservice.rollout.machine import advance as decide

T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
OLD, NEW, NEWER = "aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"

# startup budget = 10 + 3 * 2 = 16 s; settle 5 s; unschedulable grace 20 s; progress deadline 60 s
POLICY = Policy(
    failure_threshold=3,
    period_seconds=2,
    model_load_timeout_seconds=10,
    progress_deadline_seconds=60,
    auto_rollback=True,
    settle_seconds=5,
    max_restarts=3,
    unschedulable_grace_seconds=20,
)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def pod(name: str, revision: str = NEW, *, ready: bool = False, created: float = 0.0, **kw) -> PodView:
    base = dict(
        name=name,
        revision=revision,
        phase="Running" if ready else "Pending",
        ready=ready,
        ready_transition=at(created),
        created=at(created),
    )
    base.update(kw)
    return PodView(**base)


def old_pods(n: int = 2) -> tuple[PodView, ...]:
    return tuple(pod(f"old-{i}", OLD, ready=True, created=-3600) for i in range(n))


def seen(*pods: PodView, replicas: int = 2, revision: str | None = NEW, deadline: bool = False) -> Observed:
    return Observed(
        deployment_revision=revision, desired_replicas=replicas, progress_deadline_exceeded=deadline, pods=pods
    )


HEALTHY_OLD = RolloutStatus(
    current_revision=OLD, last_good_revision=OLD, phase=rollout.HEALTHY, rollout_started="2026-03-01T11:00:00.000000Z"
)
PROGRESSING_NEW = RolloutStatus(
    current_revision=NEW, last_good_revision=OLD, phase=rollout.PROGRESSING, rollout_started="2026-03-01T12:00:00.000000Z"
)


def step(prior: RolloutStatus, observed: Observed, seconds: float, desired: str = NEW, policy: Policy = POLICY) -> Decision:
    return decide(desired, prior, observed, policy, at(seconds))


def reasons(decision: Decision) -> list[str]:
    return [e.reason for e in decision.events]


def rolled_back() -> RolloutStatus:
    failing = pod("new-0", created=1, waiting_reason="ImagePullBackOff")
    return step(PROGRESSING_NEW, seen(*old_pods(), failing), 2).status
