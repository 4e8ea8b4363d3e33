"""An OcrService's condition types, in the order its status lists them."""

from __future__ import annotations

READY = "Ready"
AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SCALING_ACTIVE = "ScalingActive"
QUALITY_GATE = "QualityGate"  # spec.rollout.qualityGate's state (gate/)
MODEL_FETCHING = "ModelFetching"  # spec.model.source.s3's fetch (rollout/fetching.py)
ORDER = (READY, AVAILABLE, PROGRESSING, DEGRADED, SCALING_ACTIVE, QUALITY_GATE, MODEL_FETCHING)
