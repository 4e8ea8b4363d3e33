"""Both controllers on one runtime: the kinds they touch, the client, the cache, and the start.

The runtime knows no domain; this module hands it the operator's identity (labels.IDENTITY) and
the two controllers' tables of kinds (ocrservice/children.py, ocrbatch/kinds.py), and registers
the OcrService and OcrBatch controllers on it. handlers.py calls ``build`` at kopf's start-up.
"""

from __future__ import annotations

from typing import Any

from lightkube.config.kubeconfig import KubeConfig

from ocr_operator.labels import IDENTITY, LABEL_INSTANCE
from ocr_operator.ocrbatch import controller as batch_controller
from ocr_operator.ocrbatch import kinds as batch_kinds
from ocr_operator.ocrbatch.render import LABEL_BATCH
from ocr_operator.ocrservice import children
from ocr_operator.ocrservice import controller as service_controller
from ocr_operator.runtime.cache import Store
from ocr_operator.runtime.controller import Controller, Runtime
from ocr_operator.runtime.discovery import Discovery
from ocr_operator.runtime.kinds import ApiKind
from ocr_operator.runtime.kube import Kube

# Every kind the operator reads or writes; the kinds the cache holds (watched); pods are grouped
# by the label that names their owner.
KINDS: tuple[ApiKind, ...] = (children.OCRSERVICE, *children.KINDS.values(), *batch_kinds.KINDS.values())
WATCHED: tuple[ApiKind, ...] = (*children.watched(), *batch_kinds.CHILD_KINDS)
GROUP_LABELS = (LABEL_INSTANCE, LABEL_BATCH)
# The kinds served only where another project's CRD is installed (prometheus-operator's).
OPTIONAL: tuple[ApiKind, ...] = tuple(k for k in children.KINDS.values() if k.optional)


def client(config: KubeConfig | None = None, **kwargs: Any) -> Kube:
    """The operator's REST client, knowing every kind of both controllers."""
    return Kube(IDENTITY, KINDS, config, **kwargs)


def store() -> Store:
    return Store(IDENTITY, WATCHED, GROUP_LABELS)


def build(kube: Kube, *, workers: int = 8, namespaces: list[str] | None = None,
          rescan: Any = None) -> tuple[Runtime, Controller, Controller]:
    """The runtime with the OcrService and OcrBatch controllers on it (not started). `rescan`:
    asks kopf to rescan an API group (discovery.rescan), for optional APIs that appear later."""
    runtime = Runtime(kube, store(), namespaces=namespaces)
    runtime.discovery = Discovery(kube, {k.kind: k for k in OPTIONAL}, on_change=runtime.optional_changed, rescan=rescan)
    services = service_controller.controller(runtime, workers=workers)
    batches = batch_controller.controller(runtime, services)
    return runtime, services, batches
