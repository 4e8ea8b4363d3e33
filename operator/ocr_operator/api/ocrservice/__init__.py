"""The OcrService API: its typed models (spec and status), rules and kind.

`OcrServiceSpec` is what the operator works with; `codec.parse(OcrServiceSpec, spec)` reads a
stored object into it (ocr_operator.spec.parse), and crd.document(OCRSERVICE) is its CRD.
"""

from .env import FIELD_FOR_ENV, OPERATOR_ENV, env_override_error, server_config, spec_fields
from .kind import OCRSERVICE
from .network import (
    Auth,
    Monitoring,
    NetworkPolicySpec,
    PdbSpec,
    PrometheusRuleSpec,
    ServiceMonitorSpec,
    ServiceSpec,
    TlsSpec,
)
from .pods import RESERVED_LABEL_PREFIXES, EnvVar, LocalObjectReference, Resources, Toleration, reserved_labels_error
from .rollout import GOLDEN_SOURCE_ERROR, GoldenPages, HealthCheck, QualityGate, Rollout, Shadow
from .root import GOLDEN_PVC_ERROR, OcrServiceSpec
from .scaling import DAYS, DEFAULT_METRIC, QUEUE_METRIC, RATIO_GPU_METRIC, Autoscaling, Behavior, Metric, Schedule
from .server import Inference, Model, PvcSource
from .source import ImageSource, ModelCache, ModelSource, S3Source
from .status import OcrServiceStatus
from .tokens import TOKEN_BUDGET_ERROR, TOKEN_ORDER_ERROR, engine_error, engine_serves

__all__ = [
    "DAYS", "DEFAULT_METRIC", "FIELD_FOR_ENV", "GOLDEN_PVC_ERROR", "GOLDEN_SOURCE_ERROR",
    "OCRSERVICE", "OPERATOR_ENV", "QUEUE_METRIC", "RATIO_GPU_METRIC", "RESERVED_LABEL_PREFIXES", "TOKEN_BUDGET_ERROR",
    "TOKEN_ORDER_ERROR", "Auth", "Autoscaling", "Behavior", "EnvVar", "GoldenPages", "HealthCheck", "Inference",
    "ImageSource", "LocalObjectReference", "Metric", "Model", "ModelCache", "ModelSource", "Monitoring",
    "NetworkPolicySpec", "OcrServiceSpec", "OcrServiceStatus",
    "PdbSpec", "PrometheusRuleSpec", "PvcSource", "QualityGate", "Resources", "Rollout", "S3Source", "Schedule",
    "ServiceMonitorSpec", "Shadow", "ServiceSpec", "TlsSpec", "Toleration", "engine_error", "engine_serves",
    "env_override_error", "reserved_labels_error", "server_config", "spec_fields",
]
