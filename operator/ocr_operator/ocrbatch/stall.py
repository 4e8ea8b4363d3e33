"""Stalled workers (pure): when a running index has made no progress for spec.stallSeconds.

A worker that stops moving is not noticed by Kubernetes: a process frozen (SIGSTOP, a cgroup
freeze), a thread hung on a dead NFS volume, a node that stopped answering (its pods stay
Running in the API, their status no longer updated). The Job waits for ever, the batch with it.
So the controller reads what it already reads (each running worker's log, once per progress
interval) and asks one question of it: has this pod's progress moved?

- Progress is the work counters of the pod's last `{"progress": ...}` line (progress_mark):
  pages and documents finished, retries, 429s waited out, and the failed tries of a storage
  outage being waited out (storagewait.py: within its budget, a waiting worker is not stalled).
  The report's clock fields are left out, so a live loop that finishes nothing (every lane
  hung) is stalled too. A tail that holds no progress line at all means the worker logged more
  lines since its last report than the read takes: it is alive, so that tail itself is the mark
  (it changes while the worker logs).
- A log that cannot be read (the node unreachable: the API server cannot reach its kubelet) is
  no news: the mark stays, the clock runs. So a lost node's pod is caught by the same rule, and
  the batch needs no activeDeadlineSeconds for it.
- The clock starts when a pod is first seen running and restarts with each new pod of the index
  (a new attempt) and each change of its mark. A pod not running yet (pulling, unschedulable) is
  not watched: no worker there can be frozen, and its wait is the cluster's capacity, bounded by
  spec.deadlineSeconds when the user wants a bound.

Watch is one index's clock; observe() moves it, stalled() judges it. The controller keeps one
Watch per index in memory: after an operator restart every clock starts again, so a stall is
caught at most stallSeconds after the restart.

A stalled pod is deleted, and the Job replaces it once it has ended. A pod on a lost node never
ends (no kubelet confirms the deletion; with a podFailurePolicy the Job waits for a terminal
phase), so a pod still there stallSeconds after its deletion (lost()) is marked Failed, as the
pod garbage collector marks the pods of a node that is gone: its process, if it still runs, may
race the new pod on the shard, which the worker's writes allow (whole objects, the progress
file per pod attempt).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, Mapping

# The fields of a progress report that say work was done (progress.Progress), in a fixed order.
PROGRESS_FIELDS = ("documents_total", "documents_done", "documents_failed", "documents_skipped", "pages_total",
                   "pages_done", "pages_failed", "requests_shed", "retries", "finished", "fatal")
CONDITION = "Stalled"  # the OcrBatch's condition of its restarts
STALLED, RECOVERED = "Stalled", "Recovered"  # its reasons (True, then False)


@dataclass(frozen=True)
class Watch:
    """One index's clock: the pod it is for, what was last read of its progress, and since when."""

    pod: str  # the pod's uid: a new pod of the index is a new attempt, with a new clock
    name: str
    mark: str | None  # None: nothing read of this pod yet
    since: float  # monotonic seconds: when the pod was first seen running, or its mark last changed
    moved: bool = False  # its progress moved at least once since it was first seen


def progress_mark(report: Mapping[str, Any] | None, tail: str) -> str:
    """What progress a log read shows: the work counters of its last report, or, when the tail holds
    no report (more lines were logged since than the read takes), the tail itself."""
    if report is not None:
        return "report:" + repr((*(report.get(f) for f in PROGRESS_FIELDS), _storage_tries(report)))
    return "tail:" + hashlib.sha256(tail.encode()).hexdigest()


def _storage_tries(report: Mapping[str, Any]) -> Any:
    """A storage wait's tries (storagewait.py): a worker waiting out an outage is alive, and its own
    budget (spec.limits.storageRetrySeconds) bounds the wait, so each failed try is progress."""
    storage = report.get("storage")
    return (storage.get("waiting_since"), storage.get("retries")) if isinstance(storage, Mapping) else None


def observe(prev: Watch | None, pod: str, name: str, mark: str | None, now: float) -> Watch:
    """The index's clock after one log read of its running pod `pod` (mark None: the log could not
    be read, which is no news)."""
    if prev is None or prev.pod != pod:
        return Watch(pod, name, mark, now)
    if mark is None or mark == prev.mark:
        return prev
    return replace(prev, mark=mark, since=now, moved=prev.moved or prev.mark is not None)


def stalled(watch: Watch | None, now: float, stall_seconds: float) -> bool:
    """Whether the watched pod's progress has not moved for stall_seconds."""
    return watch is not None and now - watch.since >= stall_seconds


def message(index: int, watch: Watch, now: float, stall_seconds: float) -> str:
    """The Stalled condition's and the Warning event's words for one restart."""
    return (f"index {index}: pod {watch.name} made no progress for {now - watch.since:.0f} s (spec.stallSeconds "
            f"{stall_seconds:g}); the pod was deleted and the Job runs the index again")


@dataclass(frozen=True)
class Restart:
    """An index restarted for a stall: the pod deleted, and when (monotonic seconds)."""

    pod: str
    at: float


def lost(restart: Restart | None, pod: str, now: float, stall_seconds: float) -> bool:
    """Whether the pod deleted for a stall is still there stallSeconds later: its node does not
    confirm the deletion (lost), so the Job would wait for it for ever."""
    return restart is not None and restart.pod == pod and now - restart.at >= stall_seconds


def recovered(restarted: Mapping[int, Restart], watches: Mapping[int, Watch], finished: set[int]) -> bool:
    """Whether every index restarted for a stall has moved again: a new pod of it made progress,
    or the index finished."""
    return all(index in finished or (index in watches and watches[index].pod != r.pod and watches[index].moved)
               for index, r in restarted.items())


def failed_status() -> dict[str, Any]:
    """The status patch of a stalled pod whose node does not confirm its deletion: phase Failed (the
    Job counts it as one of the index's failures and replaces it), with the reason in words."""
    return {"status": {"phase": "Failed", "reason": STALLED,
                       "message": "deleted for a stall (OcrBatch spec.stallSeconds), and its node did not confirm "
                                  "the deletion: marked Failed by the OcrBatch controller"}}

