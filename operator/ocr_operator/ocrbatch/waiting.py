"""Why a batch's workers are not all there (pure): pods the Job cannot create, pods no node takes.

Kubernetes says neither on the Job. A pod the API server refuses (a ResourceQuota, a LimitRange,
an admission webhook, a missing ServiceAccount) is only an Event on the Job: the Job controller's
`FailedCreate`, repeated with backoff for as long as the refusal lasts, and its `SuccessfulCreate`
once a pod gets through. A pod no node takes is Pending with its PodScheduled condition False
(Unschedulable). Either way the Job waits, and a batch that reported only "the workers' pods are
starting" would wait silently with it: the controller reads the Job's Events while the Job has
fewer pods than it should (short_of_workers, at most once per progress interval) and the pods from
its cache, and says which (the Ready condition, a Warning event).

Neither ends the batch: a quota frees up as other pods end and capacity comes with autoscaling, so
the wait is bounded only where the user bounds it (spec.deadlineSeconds), as for a Job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..runtime import podstatus

FAILED_CREATE, SUCCESSFUL_CREATE = "FailedCreate", "SuccessfulCreate"  # the Job controller's Event reasons
NOT_CREATED, UNSCHEDULABLE = "WorkersNotCreated", "WorkersUnschedulable"  # the batch's reasons
MESSAGE_CHARS = 500  # a webhook's refusal can be long; a condition message stays readable


@dataclass(frozen=True)
class Waiting:
    """Why workers are missing: a Ready reason and its message."""

    reason: str
    message: str


def short_of_workers(job: Mapping[str, Any]) -> bool:
    """Whether the Job, not finished, has fewer pods than it runs at once: its parallelism, or the
    completions still to go when fewer. Only then can a refusal be current (and its Events are read)."""
    spec, st = job.get("spec") or {}, job.get("status") or {}
    if any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True" for c in st.get("conditions") or ()):
        return False
    parallelism = int(spec.get("parallelism") or 0)
    left = int(spec.get("completions") or parallelism) - int(st.get("succeeded") or 0)
    return int(st.get("active") or 0) < min(parallelism, left)


def _when(event: Mapping[str, Any]) -> str:
    """An Event's last occurrence (RFC 3339 in UTC, so the strings sort in time): a series' last
    observation, else its lastTimestamp, eventTime or creation."""
    series = event.get("series") or {}
    return str(series.get("lastObservedTime") or event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")


def refusal(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The Job controller's refusal message when its last word on creating pods was one (a
    FailedCreate no later than any SuccessfulCreate: in the same second, some pods of that sync
    were refused), else None. `events`: the Job's Events, any reasons."""
    last: dict[str, tuple[str, str]] = {}
    for event in events:
        reason = event.get("reason")
        if reason in (FAILED_CREATE, SUCCESSFUL_CREATE):
            seen = (_when(event), str(event.get("message") or ""))
            if reason not in last or seen[0] >= last[reason][0]:
                last[reason] = seen
    failed, created = last.get(FAILED_CREATE), last.get(SUCCESSFUL_CREATE)
    if failed is None or (created is not None and created[0] > failed[0]):
        return None
    return failed[1][:MESSAGE_CHARS]


def unschedulable(pods: Iterable[Mapping[str, Any]]) -> str | None:
    """The scheduler's words on the first worker no node takes (its PodScheduled condition False,
    reason Unschedulable), with the pod's name; None when every worker was placed."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("name") or ""):
        cond = podstatus.unschedulable(pod)
        if cond is not None:
            name = (pod.get("metadata") or {}).get("name")
            return f"pod {name}: {str(cond.get('message') or 'no node fits it')[:MESSAGE_CHARS]}"
    return None


def waiting(refused: str | None, pods: Iterable[Mapping[str, Any]]) -> Waiting | None:
    """Why workers are missing, the refusal first (no pod exists to be scheduled); None: nothing known."""
    if refused:
        return Waiting(NOT_CREATED, f"the Job cannot create the workers' pods: {refused}")
    said = unschedulable(pods)
    return Waiting(UNSCHEDULABLE, f"no node can take a worker: {said}") if said else None
