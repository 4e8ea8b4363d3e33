"""Thin kopf wiring: watch streams feed the runtime's cache and the controllers' queues; nothing else.

No change handlers, timers or daemons on the custom resources: they would store kopf state in
annotations or add a finalizer. `@kopf.on.event` handlers write nothing; the reconciles
(ocrservice/, ocrbatch/) are the only places that decide and write. The handlers are `async`,
so kopf runs them on the event loop's thread, the only thread that touches the queues and the
caches. The children's watches come from the controllers' tables of kinds (wiring.WATCHED).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Mapping

import kopf

from ocr_operator import settings as operator_settings
from ocr_operator import wiring
from ocr_operator.labels import MANAGED_SELECTOR
from ocr_operator.metrics import METRICS
from ocr_operator.ocrbatch.kinds import OCRBATCH
from ocr_operator.ocrservice.children import OCRSERVICE
from ocr_operator.runtime.controller import Controller, Runtime
from ocr_operator.runtime.discovery import rescan

log = logging.getLogger(__name__)

MANAGED = dict([MANAGED_SELECTOR.split("=", 1)])


class _State:
    runtime: Runtime | None = None
    services: Controller | None = None
    batches: Controller | None = None
    namespaces: list[str] | None = None  # set by __main__; None = every namespace
    insights: object | None = None  # kopf's served-resources view, set by __main__ (runtime/discovery.py)


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
    workers = int(os.environ.get("OCR_OPERATOR_WORKERS", "8"))
    insights = STATE.insights
    STATE.runtime, STATE.services, STATE.batches = wiring.build(
        wiring.client(), workers=workers, namespaces=STATE.namespaces,
        rescan=functools.partial(rescan, insights, settings) if insights is not None else None)
    METRICS.state.controller = STATE.services
    await STATE.runtime.start()


@kopf.on.cleanup()
async def cleanup(**_):
    if STATE.runtime is not None:
        await STATE.runtime.stop()


@kopf.on.probe(id="reconciles")
def probe_reconciles(**_):
    rt, c = STATE.runtime, STATE.services
    if rt is None or c is None:
        return None
    return {"objects": len(c.cache), "reconciles": c.reconciles, "writes": c.writes,
            "requests": rt.kube.requests, "queued": len(c.queue), "queue_adds": c.queue.adds,
            "child_events": rt.child_events, "child_wakes": rt.child_wakes,
            "events_posted": rt.recorder.posted, "events_aggregated": rt.recorder.aggregated,
            "events_dropped": rt.recorder.dropped, "requests_by": dict(rt.kube.by_request)}


@kopf.on.event(OCRSERVICE.group, OCRSERVICE.version, OCRSERVICE.plural)
async def ocrservice_event(event, **_):
    if STATE.services is not None:
        STATE.services.owner_event(event.get("type"), event["object"])


@kopf.on.event(OCRBATCH.group, OCRBATCH.version, OCRBATCH.plural)
async def ocrbatch_event(event, **_):
    if STATE.batches is not None:
        STATE.batches.owner_event(event.get("type"), event["object"])


@kopf.on.event("apiextensions.k8s.io", "v1", "customresourcedefinitions", id="optional-apis")
async def crd_event(event, **_):
    """An optional API's CRD deleted or replaced (runtime/discovery.py). kopf watches CRDs anyway."""
    if STATE.runtime is not None:
        STATE.runtime.crd_event(event.get("type"), event["object"])


def _child_handler(kind: str):
    async def child_event(event, **_):
        if STATE.runtime is not None:
            STATE.runtime.child_event(kind, event.get("type"), event["object"])
    return child_event


# The kinds the operator applies are watched whole (every taken name); pods, Jobs and ReplicaSets by label.
for _kind in wiring.WATCHED:
    kopf.on.event(_kind.group, _kind.version, _kind.plural, labels=None if _kind.owned else MANAGED,
                  id=f"wake-owner-{_kind.plural}")(_child_handler(_kind.kind))
