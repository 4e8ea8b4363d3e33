"""The OcrService kind: names, printer columns and the scale subresource the HorizontalPodAutoscaler uses."""

from __future__ import annotations

from ..crd import Column, Kind, Scale
from .root import OcrServiceSpec
from .status import OcrServiceStatus

READY = '.status.conditions[?(@.type=="Ready")]'

OCRSERVICE = Kind(
    kind="OcrService",
    plural="ocrservices",
    singular="ocrservice",
    short_names=("ocrs",),
    description="OcrService runs a DeepSeek-OCR 2 inference server on GPU nodes: a Deployment with health probes, a "
                "Service, a ConfigMap with the server configuration, an autoscaler on GPU utilisation and the guard "
                "rails around them. Upgrades that fail their health checks are rolled back automatically.",
    spec=OcrServiceSpec,
    status=OcrServiceStatus,
    scale=Scale(".spec.replicas", ".status.replicas", ".status.selector"),
    columns=(
        Column("Ready", "string", f"{READY}.status", "Status of the Ready condition."),
        Column("Reason", "string", f"{READY}.reason", "Reason of the Ready condition."),
        Column("Replicas", "string", ".status.replicaSummary", "Ready/desired pods."),
        Column("Revision", "string", ".status.currentRevision", "Pod template revision the Deployment runs now."),
        Column("Age", "date", ".metadata.creationTimestamp"),
        Column("GPU-Util", "string", ".status.gpuUtilization",
               "Current/target GPU utilisation reported by the HorizontalPodAutoscaler.", priority=1),
        Column("Model", "string", ".spec.model.name", "Model served.", priority=1),
        Column("Source", "string", ".status.model.source", "Where the running pods' weights come from.", priority=1),
        Column("Model-Digest", "string", ".status.model.digest", "Digest of the running pods' weights image.",
               priority=1),
        Column("Last-Good", "string", ".status.lastGoodRevision", "Last revision that became healthy.", priority=1),
        Column("Quality", "number", ".status.qualityGate.meanDistance",
               "Mean normalised edit distance of the quality gate's last verdict.", priority=1),
        Column("URL", "string", ".status.url", "In-cluster URL of the service.", priority=1),
    ),
)
