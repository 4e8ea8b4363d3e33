"""Thin kopf wiring: watch streams feed the controller's cache and work queue; nothing else.

No change handlers, timers or daemons on the OcrService: they would store kopf state in
annotations or add a finalizer. `@kopf.on.event` handlers write nothing; the reconcile
(reconcile.py) is the only place that decides and writes. The handlers are `async`, so kopf
runs them on the event loop's thread, the only thread that touches the queue and the caches.
The children's watches come from the one table of kinds (children.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Mapping

import kopf

from . import children, naming, settings as operator_settings
from .batch import controller as batch_controller
from .batch.render import LABEL_BATCH
from .controller import Controller
from .kube import Kube
from .metrics import METRICS
from .rescan import KopfRescan
from .spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

MANAGED = {naming.LABEL_MANAGED_BY: naming.FIELD_MANAGER}


class _State:
    controller: Controller | None = None
    batches: batch_controller.BatchController | None = None
    namespaces: list[str] | None = None  # set by __main__; None = every namespace
    insights: object | None = None  # kopf's served-resources view, set by __main__ (rescan.py)


STATE = _State()


def in_cluster_server(env: Mapping[str, str] = os.environ) -> str | None:
    """The API server's address from the kubelet's KUBERNETES_SERVICE_HOST/PORT (what client-go's
    in-cluster config and our own client use): no cluster DNS needed. kopf's own in-cluster login
    names https://kubernetes.default.svc, which fails in pods without cluster DNS."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


@kopf.on.login()
def login(**kwargs):
    """Service account in a pod, else KUBECONFIG / ~/.kube/config (same as our own client)."""
    info = kopf.login_with_service_account(**kwargs)
    if info is not None and (server := in_cluster_server()):
        return dataclasses.replace(info, server=server)
    return info or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_):
    operator_settings.configure(settings)
    settings.watching.label_selectors["batch", "v1", "jobs"] = operator_settings.MANAGED_SELECTOR
    workers = int(os.environ.get("OCR_OPERATOR_WORKERS", "8"))
    rescan = KopfRescan(STATE.insights, settings).rescan if STATE.insights is not None else None
    STATE.controller = Controller(Kube(), workers=workers, namespaces=STATE.namespaces, rescan=rescan)
    METRICS.state.controller = STATE.controller
    await STATE.controller.start()
    STATE.batches = batch_controller.BatchController(STATE.controller.kube, STATE.controller)
    STATE.batches.start()


@kopf.on.cleanup()
async def cleanup(**_):
    if STATE.batches is not None:
        await STATE.batches.stop()
    if STATE.controller is not None:
        await STATE.controller.stop()


@kopf.on.probe(id="reconciles")
def probe_reconciles(**_):
    c = STATE.controller
    if c is None:
        return None
    return {"objects": len(c.cache), "reconciles": c.reconciles, "writes": c.writes,
            "requests": c.kube.requests, "queued": len(c.queue), "queue_adds": c.queue.adds,
            "child_events": c.child_events, "child_wakes": c.child_wakes,
            "events_posted": c.recorder.posted, "events_aggregated": c.recorder.aggregated,
            "events_dropped": c.recorder.dropped, "requests_by": dict(c.kube.by_request)}


@kopf.on.event(GROUP, VERSION, PLURAL)
async def ocrservice_event(event, **_):
    if STATE.controller is not None:
        STATE.controller.ocrservice_event(event.get("type"), event["object"])


def _child_handler(kind: str):
    async def child_event(event, **_):
        if STATE.controller is not None:
            STATE.controller.child_event(kind, event.get("type"), event["object"])
    return child_event


for _kind in children.watched():
    kopf.on.event(_kind.group, _kind.version, _kind.plural, labels=MANAGED,
                  id=f"wake-owner-{_kind.plural}")(_child_handler(_kind.kind))


# OcrBatches (batch/controller.py): the batches, their Jobs and their worker pods (the same
# label-filtered pod watch as above; the workers carry LABEL_BATCH).
@kopf.on.event("ocr.causalflow.dev", "v1alpha1", "ocrbatches")
async def ocrbatch_event(event, **_):
    if STATE.batches is not None:
        STATE.batches.batch_event(event.get("type"), event["object"])


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_BATCH: kopf.PRESENT}, id="wake-batch-jobs")
async def batch_job_event(event, **_):
    if STATE.batches is not None:
        STATE.batches.job_event(event.get("type"), event["object"])


@kopf.on.event("", "v1", "pods", labels={LABEL_BATCH: kopf.PRESENT}, id="wake-batch-pods")
async def batch_pod_event(event, **_):
    if STATE.batches is not None:
        STATE.batches.pod_event(event.get("type"), event["object"])
