"""spec.model.source.s3's ModelFetching condition, I/O half: the fetching pod's last log line.

While a pod's model-fetch init container runs, its status does not change, so the reconcile reads
the fetcher's progress from its log: one pods/log request (tailLines=1, at most
rollout.fetching.LOG_LIMIT_BYTES) for the first fetching pod, once per reconcile, and asks to be
woken again in PROGRESS_REQUEUE_SECONDS while one fetches. A log that cannot be read (the pod just
ended, its node is unreachable) shows the pod as fetching without a percentage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ocr_operator.runtime.kube import ApiError, Kube

from .rollout import Decision, Observed
from .rollout.fetching import (FETCH_CONTAINER, FETCH_REASONS, LOG_LIMIT_BYTES, PROGRESS_REQUEUE_SECONDS, Progress,
                               condition, fetching_pod, parse_progress)

__all__ = ["PROGRESS_REQUEUE_SECONDS", "FetchReport", "read"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchReport:
    condition: tuple[str, str, str]  # ModelFetching (status, reason, message)
    pod: str | None = None  # the pod fetching now
    progress: Progress | None = None


async def read(kube: Kube, namespace: str, desired_revision: str, observed: Observed,
               decision: Decision) -> FetchReport:
    st = decision.status
    pod = fetching_pod(observed.pods, desired_revision) or fetching_pod(observed.pods, decision.target_revision)
    progress = None
    if pod is not None:
        try:
            text = await kube.read_log(namespace, pod, tail_lines=1, limit_bytes=LOG_LIMIT_BYTES,
                                       container=FETCH_CONTAINER)
            progress = parse_progress(text)
        except ApiError as exc:
            log.debug("%s/%s: model-fetch log not read: %s", namespace, pod, exc)
    failed = None
    if st.failed_revision == desired_revision and st.failed_reason in FETCH_REASONS:
        failed = (st.failed_reason, st.failed_message or "")
    return FetchReport(condition(pod, progress, failed), pod, progress)
