"""Watch one namespace's Deployment and Pods during a rollout, timestamping what happens.

Used by tests/e2e/test_rollback.py and bench/rollback_bench.py to check that old pods keep
serving (the minimum number of Ready old-revision pods over the whole rollout) and to measure
the time from the first failure signal a pod or the Deployment reports to the moment the
operator's rollback lands in the Deployment's pod template. All times are this machine's
monotonic clock at the moment the watch delivered the event (Kubernetes timestamps have
one-second resolution, too coarse for the measure).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

REVISION = "ocr.causalflow.dev/revision"
WAITING_FAILURES = {
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError", "OOMKilled",
}


def _cond(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def _ready(pod: dict) -> bool:
    return _cond(pod, "Ready").get("status") == "True"


def _wall(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.timestamp()
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _revision(pod: dict) -> str | None:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(REVISION)


@dataclass
class PodTrack:
    revision: str | None
    created: float  # creationTimestamp on the monotonic clock (what the operator's deadlines use)
    ever_ready: bool = False
    ready_lost: float | None = None
    waiting: dict[str, float] = field(default_factory=dict)  # reason -> first seen
    unschedulable: float | None = None


class RolloutWatch:
    """Background watches on the Pods and Deployments of one namespace."""

    def __init__(self, kube: Any, namespace: str, deployment: str) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(kube)
        self.apps = client.AppsV1Api(kube)
        self.kube = kube
        self.namespace = namespace
        self.deployment = deployment
        self.lock = threading.Lock()
        self.pods: dict[str, dict] = {}
        self.tracks: dict[str, PodTrack] = {}
        self.templates: list[tuple[float, str | None]] = []  # (t, template revision) on change
        self.deadline_exceeded: float | None = None
        self.create_refused: float | None = None  # the Deployment's ReplicaFailure (FailedCreate), first seen
        self.ready_samples: list[tuple[float, dict[str, int]]] = []
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[Any] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> "RolloutWatch":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for target in (self._watch_pods, self._watch_deployments):
            thread = threading.Thread(target=self._loop, args=(target,), daemon=True)
            thread.start()
            self._threads.append(thread)
        self._synced.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.templates:
            time.sleep(0.05)

    def stop(self) -> None:
        self._stop.set()
        for w in list(self._watches):
            w.stop()
        for thread in self._threads:
            thread.join(timeout=5)

    def _loop(self, target) -> None:
        while not self._stop.is_set():
            try:
                target()
            except Exception:  # noqa: BLE001 - a dropped watch is restarted
                time.sleep(0.2)

    def _stream(self, fn, **kw):
        from kubernetes import watch

        w = watch.Watch()
        self._watches.append(w)
        try:
            for event in w.stream(fn, self.namespace, timeout_seconds=30, _request_timeout=40, **kw):
                if self._stop.is_set():
                    return
                yield event
        finally:
            w.stop()

    def _watch_pods(self) -> None:
        # List, then watch from the list's resourceVersion: the first sample holds every pod.
        listed = self.core.list_namespaced_pod(self.namespace)
        now = time.monotonic()
        with self.lock:
            self.pods = {}
            for item in listed.items:
                pod = self.kube.sanitize_for_serialization(item)
                self.pods[pod["metadata"]["name"]] = pod
                self._track(pod, now)
            self._sample(now)
        self._synced.set()
        for event in self._stream(self.core.list_namespaced_pod, resource_version=listed.metadata.resource_version):
            now = time.monotonic()
            pod = self.kube.sanitize_for_serialization(event["object"])
            name = pod["metadata"]["name"]
            with self.lock:
                if event["type"] == "DELETED":
                    self.pods.pop(name, None)
                else:
                    self.pods[name] = pod
                    self._track(pod, now)
                self._sample(now)

    def _watch_deployments(self) -> None:
        for event in self._stream(self.apps.list_namespaced_deployment):
            now = time.monotonic()
            dep = self.kube.sanitize_for_serialization(event["object"])
            if dep["metadata"]["name"] != self.deployment or event["type"] == "DELETED":
                continue
            revision = ((dep["spec"]["template"].get("metadata") or {}).get("labels") or {}).get(REVISION)
            progressing = _cond(dep, "Progressing")
            with self.lock:
                if not self.templates or self.templates[-1][1] != revision:
                    self.templates.append((now, revision))
                if progressing.get("reason") == "ProgressDeadlineExceeded" and self.deadline_exceeded is None:
                    self.deadline_exceeded = now
                refused = _cond(dep, "ReplicaFailure")
                if refused.get("reason") == "FailedCreate" and refused.get("status") == "True" and self.create_refused is None:
                    self.create_refused = now

    def _track(self, pod: dict, now: float) -> None:
        name = pod["metadata"]["name"]
        track = self.tracks.get(name)
        if track is None:
            created = _wall(pod["metadata"].get("creationTimestamp"))
            mono = now if created is None else created - (time.time() - time.monotonic())
            track = self.tracks[name] = PodTrack(_revision(pod), mono)
        if _ready(pod):
            track.ever_ready = True
        elif track.ever_ready and track.ready_lost is None:
            track.ready_lost = now
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            reason = ((cs.get("state") or {}).get("waiting") or {}).get("reason")
            if reason in WAITING_FAILURES:
                track.waiting.setdefault(reason, now)
            # A container that ran out of memory shows it in its last termination.
            for term in ((cs.get("state") or {}).get("terminated"), (cs.get("lastState") or {}).get("terminated")):
                if (term or {}).get("reason") == "OOMKilled":
                    track.waiting.setdefault("OOMKilled", now)
        sched = _cond(pod, "PodScheduled")
        if sched.get("reason") == "Unschedulable" and track.unschedulable is None:
            track.unschedulable = now

    def _sample(self, now: float) -> None:
        counts: dict[str, int] = {}
        for pod in self.pods.values():
            if _ready(pod) and not pod["metadata"].get("deletionTimestamp"):
                rev = _revision(pod) or ""
                counts[rev] = counts.get(rev, 0) + 1
        self.ready_samples.append((now, counts))

    # ------------------------------------------------------------------ questions

    def min_ready(self, revision: str | None, since: float | None = None) -> int:
        """Fewest Ready (not terminating) pods of ``revision`` (None: of any revision) seen at
        any moment since ``since``: the samples after it, and the one in force at it (the last
        before it), so a rollout that makes no pod at all still has its old pods counted."""
        with self.lock:
            before = [c for t, c in self.ready_samples if since is not None and t < since][-1:]
            counts = before + [c for t, c in self.ready_samples if since is None or t >= since]
        samples = [c.get(revision, 0) if revision is not None else sum(c.values()) for c in counts]
        return min(samples) if samples else 0

    def pod_count(self, revision: str) -> int:
        """Pods of ``revision`` that still exist (terminating ones included)."""
        with self.lock:
            return sum(1 for pod in self.pods.values() if _revision(pod) == revision)

    def template_times(self) -> list[tuple[float, str | None]]:
        with self.lock:
            return list(self.templates)

    def rollback_applied(self, failed: str, good: str) -> float | None:
        """When the Deployment's template went from ``failed`` back to ``good``."""
        seen_failed = False
        for t, rev in self.template_times():
            if rev == failed:
                seen_failed = True
            elif seen_failed and rev == good:
                return t
        return None

    def failure_signal(self, revision: str, reason: str, policy: dict[str, int]) -> float | None:
        """The moment the first failure signal of ``reason`` for ``revision`` was observable:
        the waiting reason or lost readiness as the watch saw it, or, for the deadline-based
        reasons, the deadline itself (pod creationTimestamp + startup budget / unschedulable
        grace, or the Deployment's refusal to create pods + that grace, as the operator counts them)."""
        with self.lock:
            tracks = [t for t in self.tracks.values() if t.revision == revision]
            deadline, refused = self.deadline_exceeded, self.create_refused
        times: list[float] = []
        for t in tracks:
            if reason in WAITING_FAILURES and reason in t.waiting:
                times.append(t.waiting[reason])
            elif reason == "ReadinessLost" and t.ready_lost is not None:
                times.append(t.ready_lost)
            elif reason == "ReadinessTimeout":
                budget = policy["modelLoadTimeoutSeconds"] + policy["failureThreshold"] * policy["periodSeconds"]
                times.append(t.created + budget)
            elif reason == "Unschedulable" and t.unschedulable is not None:
                times.append(max(t.unschedulable, t.created + policy["unschedulableGraceSeconds"]))
        if reason == "ProgressDeadlineExceeded" and deadline is not None:
            times.append(deadline)
        if reason == "FailedCreate" and refused is not None:  # no pod: the Deployment's refusal, then the grace
            times.append(refused + policy["unschedulableGraceSeconds"])
        return min(times) if times else None
