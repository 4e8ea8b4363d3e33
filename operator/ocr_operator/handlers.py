"""Thin kopf wiring: watch streams feed the controller's work queue; nothing else.

No change handlers, timers or daemons on the OcrService: they would store kopf state in
annotations or add a finalizer. `@kopf.on.event` handlers write nothing; the reconcile
(reconcile.py) is the only place that decides and writes.
"""

from __future__ import annotations

import logging
import os

import kopf

from . import naming, settings as operator_settings
from .controller import Controller
from .kube import Kube
from .spec import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

MANAGED = {naming.LABEL_MANAGED_BY: naming.FIELD_MANAGER}


class _State:
    controller: Controller | None = None


STATE = _State()


@kopf.on.login()
def login(**kwargs):
    """Service account in a pod, else KUBECONFIG / ~/.kube/config (same as our own client)."""
    return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, **_):
    operator_settings.configure(settings)
    workers = int(os.environ.get("OCR_OPERATOR_WORKERS", "8"))
    STATE.controller = Controller(Kube(), workers=workers)
    await STATE.controller.start()


@kopf.on.cleanup()
async def cleanup(**_):
    if STATE.controller is not None:
        await STATE.controller.stop()


@kopf.on.probe(id="reconciles")
def probe_reconciles(**_):
    c = STATE.controller
    return None if c is None else {"objects": len(c.cache), "reconciles": c.reconciles, "writes": c.writes,
                                   "requests": c.kube.requests, "queued": len(c.queued)}


@kopf.on.event(GROUP, VERSION, PLURAL)
def ocrservice_event(event, **_):
    if STATE.controller is not None:
        STATE.controller.observe(event.get("type"), event["object"])


def _wake(event, **_):
    if STATE.controller is not None:
        STATE.controller.wake_owner(event["object"])


for _group, _version, _plural in operator_settings.CHILD_RESOURCES:
    kopf.on.event(_group or "", _version, _plural, labels=MANAGED, id=f"wake-owner-{_plural}")(_wake)
