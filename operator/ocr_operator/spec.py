"""OcrService custom resource -> typed, defaulted, frozen spec.

The spec's models are the API's (ocr_operator.api.ocrservice): each field's default, bounds and
rules are written there once, and the CRD is generated from them (`make generate`). The API server
applies them to every stored object; `parse` applies the same definitions again, so that a spec
coming from anywhere (a unit test, an object stored before a default or rule was added) reads the
same and is refused with the same message naming the field. One default depends on another field
and so is not in the schema: spec.inference.maxVisualTokens follows spec.engine (OcrServiceSpec
fills it in).
"""

from __future__ import annotations

from typing import Any, Mapping

from .api import API_VERSION, GROUP, VERSION
from .api.codec import SpecError, dump
from .api.codec import parse as _parse
from .api.ocrservice import (
    DAYS,
    DEFAULT_METRIC,
    FIELD_FOR_ENV,
    GOLDEN_PVC_ERROR,
    GOLDEN_SOURCE_ERROR,
    OCRSERVICE,
    QUEUE_METRIC,
    RATIO_GPU_METRIC,
    RESERVED_LABEL_PREFIXES,
    TOKEN_BUDGET_ERROR,
    TOKEN_ORDER_ERROR,
    Auth,
    Autoscaling,
    HealthCheck,
    Inference,
    Metric,
    Model,
    NetworkPolicySpec,
    OcrServiceSpec,
    PdbSpec,
    PrometheusRuleSpec,
    PvcSource,
    QualityGate,
    Resources,
    Rollout,
    Schedule,
    ServiceMonitorSpec,
    ServiceSpec,
    Shadow,
    engine_error,
    engine_serves,
    env_override_error,
    reserved_labels_error,
)

KIND = OCRSERVICE.kind
PLURAL = OCRSERVICE.plural


def parse(spec: Mapping[str, Any]) -> OcrServiceSpec:
    """Parse, default and validate an OcrService `spec` mapping; raise SpecError naming the field."""
    return _parse(OcrServiceSpec, spec)


def validate(s: OcrServiceSpec) -> None:
    """The CRD's bounds and rules on a spec built in code: what `parse` checks, on its wire form."""
    parse(dump(s))


__all__ = [
    "API_VERSION", "DAYS", "DEFAULT_METRIC", "FIELD_FOR_ENV", "GOLDEN_PVC_ERROR",
    "GOLDEN_SOURCE_ERROR", "GROUP", "KIND", "PLURAL", "QUEUE_METRIC", "RATIO_GPU_METRIC", "RESERVED_LABEL_PREFIXES",
    "TOKEN_BUDGET_ERROR", "TOKEN_ORDER_ERROR", "VERSION", "Auth", "Autoscaling", "HealthCheck", "Inference", "Metric",
    "Model", "NetworkPolicySpec", "OcrServiceSpec", "PdbSpec", "PrometheusRuleSpec", "PvcSource", "QualityGate",
    "Resources", "Rollout", "Schedule", "ServiceMonitorSpec", "ServiceSpec", "Shadow", "SpecError", "engine_error",
    "engine_serves", "env_override_error", "parse", "reserved_labels_error", "validate",
]
