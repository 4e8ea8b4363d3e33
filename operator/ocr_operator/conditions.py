"""Condition types, CamelCase reasons, set_condition that keeps lastTransitionTime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

READY = "Ready"
AVAILABLE = "Available"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
SCALING_ACTIVE = "ScalingActive"
QUALITY_GATE = "QualityGate"  # spec.rollout.qualityGate's state (quality.py)
ORDER = (READY, AVAILABLE, PROGRESSING, DEGRADED, SCALING_ACTIVE, QUALITY_GATE)

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


def merge(existing: Iterable[Mapping[str, Any]] | None, new: Iterable[Condition], *, generation: int,
          now: str) -> tuple[list[dict[str, Any]], list[tuple[Condition, str | None]]]:
    """The new condition list (in ORDER) and the conditions whose status changed, each with
    its previous status (None when it is new). lastTransitionTime survives while the status
    stays the same, so an unchanged condition renders byte-identical (no write)."""
    old = {c.get("type"): c for c in existing or ()}
    out: list[dict[str, Any]] = []
    changed: list[tuple[Condition, str | None]] = []
    for cond in sorted(new, key=lambda c: ORDER.index(c.type) if c.type in ORDER else len(ORDER)):
        prev = old.get(cond.type)
        same = prev is not None and prev.get("status") == cond.status
        out.append({
            "type": cond.type,
            "status": cond.status,
            "reason": cond.reason,
            "message": cond.message,
            "lastTransitionTime": prev.get("lastTransitionTime") if same and prev.get("lastTransitionTime") else now,
            "observedGeneration": generation,
        })
        if not same:
            changed.append((cond, prev.get("status") if prev else None))
    return out, changed


def get(conditions: Iterable[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions or () if c.get("type") == type_), None)
