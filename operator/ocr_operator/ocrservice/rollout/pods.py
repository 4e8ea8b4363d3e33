"""Judging pods: what Kubernetes reports about a revision's pods, and the first failure it shows.

Only pods of the revision being rolled out are judged; old pods and a replica-count change (HPA)
never start or fail a rollout. Pods the Deployment cannot create at all (its ReplicaFailure
condition: a ResourceQuota, a missing RuntimeClass, Pod Security admission) fail the revision once
the refusal has lasted the unschedulable grace, as pods that find no node do. The last good
revision proved that it starts and serves, so its pods fail it only for what its template cannot
do (pull its image, create its container, get scheduled); a settled revision is not judged at all.

Readiness lost counts once it has lasted a second (``READINESS_LOSS_HOLD_SECONDS``): a probe takes
readiness away only after failureThreshold failed probes and gives it back no sooner than the next
probe, periodSeconds (at least 1 s) later, while the kubelet's own status sync can write Ready False
for a few milliseconds between two Trues (a pod sync that read the probe's result just before it
turned). Such a blip restarts the settle clock; it never fails the revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from ...runtime import podstatus
from ..naming import GATE_CONDITION
from .fetching import fetch_state
from ..naming import REVISION_KEY as REVISION_LABEL
from .model import (CONFIG_ERROR_REASONS, IMAGE_PULL_REASONS, REASON_CRASH_LOOP, REASON_FAILED_CREATE, REASON_OOM,
                    REASON_PROGRESS_DEADLINE, REASON_READINESS_LOST, REASON_READINESS_TIMEOUT, REASON_TOO_MANY_RESTARTS,
                    REASON_UNSCHEDULABLE, Failure, Observed, PodView, Policy, RolloutStatus, parse_time)

# Ready's lastTransitionTime has whole seconds: 2 s on this clock is at least 1 s of NotReady.
READINESS_LOSS_HOLD_SECONDS = 2.0


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
    if pod.fetch_failure is not None:
        reason, why = pod.fetch_failure
        return Failure(reason, f"{where} could not fetch its model ({reason}): {why}", pod.name)
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
        if _readiness_loss_hold(pod, now) > 0:
            return None  # a blip so far: judged again when the hold ends (pod_deadline)
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
            + (f" + {policy.gate_seconds:.0f}s quality gate" if policy.gate_seconds else "")
            + (f" + {policy.fetch_seconds:.0f}s model fetch" if policy.fetch_seconds else "") + f"){detail}",
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


def _readiness_loss_hold(pod: PodView, now: datetime) -> float:
    """Seconds until a pod that lost readiness has been NotReady long enough to count (0: it counts)."""
    if pod.ready_transition is None:
        return 0.0
    return max(0.0, READINESS_LOSS_HOLD_SECONDS - (now - pod.ready_transition).total_seconds())


def _age(pod: PodView, now: datetime) -> float:
    return (now - pod.created).total_seconds()


def pod_deadline(pod: PodView, policy: Policy, now: datetime, prior: RolloutStatus) -> float | None:
    """Seconds until this (healthy so far) pod's next deadline: the end of a readiness loss's hold,
    unschedulable grace or startup budget."""
    if pod.ready:
        return None
    if _lost_readiness(pod, prior):
        return _readiness_loss_hold(pod, now)
    limit = policy.unschedulable_grace_seconds if pod.unschedulable else policy.startup_budget_seconds
    return limit - _age(pod, now)


def create_failure_since(revision: str, observed: Observed, started: datetime | None) -> datetime | None:
    """Since when the Deployment has refused to create pods of ``revision`` (None: it creates
    them). Counted from the rollout's start at the earliest: the Deployment also reports an older
    ReplicaSet's refusal until that one's controller clears it."""
    if observed.create_failure is None or observed.deployment_revision != revision:
        return None
    _, since = observed.create_failure
    return since if started is None else max(since, started)


def create_failure_deadline(revision: str, observed: Observed, policy: Policy, now: datetime,
                            started: datetime | None) -> float | None:
    """Seconds until that refusal has lasted the unschedulable grace (<= 0: it has), or None."""
    since = create_failure_since(revision, observed, started)
    return None if since is None else policy.unschedulable_grace_seconds - (now - since).total_seconds()


def find_failure(
    revision: str, prior: RolloutStatus, observed: Observed, policy: Policy, now: datetime
) -> Failure | None:
    """The first failure of ``revision``: pods in creation order, then pods it cannot create (for
    longer than the unschedulable grace: a quota may free up as other pods of the namespace end),
    then the progress deadline.

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
    started, refused = prior.started_at, observed.create_failure
    since = create_failure_since(revision, observed, started)
    if refused is not None and since is not None and (now - since).total_seconds() >= policy.unschedulable_grace_seconds:
        return Failure(
            REASON_FAILED_CREATE,
            f"the Deployment cannot create pods of revision {revision} for {(now - since).total_seconds():.0f}s: {refused[0]}",
        )
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


def all_ready(revision: str, observed: Observed) -> tuple[int, bool]:
    ready = sum(1 for p in observed.pods if p.revision == revision and p.ready and not p.deleting)
    return ready, observed.deployment_revision == revision and ready >= observed.desired_replicas


def pod_view(pod: Mapping[str, Any], container: str | None = None) -> PodView:
    """Reduce a Pod (as a dict, camelCase like the API returns) to a PodView.

    ``container`` names the container to judge; default: the worst of all containers.
    """
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready_cond = conditions.get("Ready") or {}
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
    sched = podstatus.unschedulable(pod)
    unschedulable = sched is not None
    containers_ready = (conditions.get("ContainersReady") or {}).get("status") == "True"
    gate = (conditions.get(GATE_CONDITION) or {}).get("status")
    awaiting_gate = (containers_ready and ready_cond.get("status") == "False"
                     and ready_cond.get("reason") == "ReadinessGatesNotReady" and gate != "True")
    if waiting_message:
        message = waiting_message
    elif sched is not None:
        message = sched.get("message") or ""
    else:
        message = ready_cond.get("message") or ""
    created = parse_time(meta.get("creationTimestamp")) or datetime.fromtimestamp(0, timezone.utc)
    fetch = fetch_state(pod)
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
        fetching=fetch is not None and fetch.running,
        fetch_failure=(fetch.reason, fetch.message) if fetch is not None and fetch.reason else None,
    )


def summarize(deployment: Mapping[str, Any] | None, pods: Iterable[Mapping[str, Any]]) -> Observed:
    """What the state machine reads of the live Deployment and its pods (dicts, camelCase)."""
    deployment = deployment or {}
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    progressing = conditions.get("Progressing") or {}
    refused = conditions.get("ReplicaFailure") or {}
    since = parse_time(refused.get("lastTransitionTime"))
    create_failure = None
    if refused.get("status") == "True" and refused.get("reason") == REASON_FAILED_CREATE and since is not None:
        create_failure = (refused.get("message") or "", since)
    replicas = spec.get("replicas")
    return Observed(
        deployment_revision=(meta.get("annotations") or {}).get(REVISION_LABEL),
        desired_replicas=int(replicas if replicas is not None else 1),
        progress_deadline_exceeded=progressing.get("status") == "False"
        and progressing.get("reason") == "ProgressDeadlineExceeded",
        pods=tuple(pod_view(p) for p in pods),
        deployment_ready_replicas=int(status.get("readyReplicas") or 0) if deployment else None,
        create_failure=create_failure,
    )
