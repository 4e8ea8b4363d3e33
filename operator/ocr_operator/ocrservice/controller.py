"""The OcrService controller: the reconcile (reconcile.py) on the runtime's controller core.

A child or pod event names its OcrService by the ``app.kubernetes.io/instance`` label; an
OcrService that is gone takes its children and pods out of the cache (garbage collection deletes
them). Reconciles are counted in the operator's metrics, rollbacks by their reason.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from ocr_operator.labels import LABEL_INSTANCE
from ocr_operator.metrics import METRICS
from ocr_operator.runtime.controller import Context, Controller, Key, Result, Runtime
from ocr_operator.runtime.jobs import Jobs

from . import children, gatekey
from .reconcile import reconcile

# Reconciles handed out per second (burst twice that); 0 = unlimited.
QPS = float(os.environ.get("OCR_OPERATOR_QPS", "100"))
# A status patch of counts and messages only (status.urgent) waits until this long after the
# object's previous status write; conditions, phase and revisions are written at once. 0 = never wait.
STATUS_COALESCE_SECONDS = float(os.environ.get("OCR_OPERATOR_STATUS_COALESCE_SECONDS", "2"))


class OcrServices:
    """The domain's part of the OcrService controller (runtime.controller.Reconciler)."""

    kind = children.OCRSERVICE

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def reconcile(self, owner: Mapping[str, Any], ctx: Context) -> Result:
        result = await reconcile(self.runtime, owner, ctx)
        for _, reason, _ in result.events:
            if reason == "RolledBack":
                METRICS.rolled_back(((result.status or owner).get("status") or {}).get("failedReason"))
        return result

    def owner_of(self, obj: Mapping[str, Any]) -> Key | None:
        md = obj.get("metadata") or {}
        owner = (md.get("labels") or {}).get(LABEL_INSTANCE)
        return (md.get("namespace") or "", owner) if owner else None

    def forgotten(self, key: Key, last: Mapping[str, Any], jobs: Jobs) -> None:
        ns, name = key
        if ns and name:
            self.runtime.store.forget(ns, children.objects(name), (LABEL_INSTANCE, name))
            gatekey.forget(ns, name)


def controller(runtime: Runtime, *, workers: int = 8, qps: float = QPS,
               status_coalesce: float = STATUS_COALESCE_SECONDS) -> Controller:
    """The OcrService controller on `runtime`."""
    return Controller(runtime, OcrServices(runtime), workers=workers, qps=qps, status_coalesce=status_coalesce,
                      observer=METRICS)
