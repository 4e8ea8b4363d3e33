"""Status conditions (metav1.Condition's shape) and the JSON merge patch of a status. Pure.

merge keeps lastTransitionTime while a condition's status stays the same, so an unchanged
condition renders byte-identical and a reconcile that changed nothing writes nothing; diff turns
a whole new status into the patch of what changed, or None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


def merge(existing: Iterable[Mapping[str, Any]] | None, new: Iterable[Condition], *, generation: int,
          now: str, order: tuple[str, ...] = ()) -> tuple[list[dict[str, Any]], list[tuple[Condition, str | None]]]:
    """The new condition list (types in `order` first, in that order; the others as given) and
    the conditions whose status changed, each with its previous status (None when it is new)."""
    old = {c.get("type"): c for c in existing or ()}
    out: list[dict[str, Any]] = []
    changed: list[tuple[Condition, str | None]] = []
    for cond in sorted(new, key=lambda c: order.index(c.type) if c.type in order else len(order)):
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


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch turning `old` into `new` (top-level keys; None deletes), or None if equal."""
    old = old or {}
    patch: dict[str, Any] = {k: v for k, v in new.items() if old.get(k) != v}
    for key in old:
        if key not in new:
            patch[key] = None
    # A nested record (status.rollout) must lose keys that are gone: send explicit nulls.
    for key, value in list(patch.items()):
        if isinstance(value, dict) and isinstance(old.get(key), dict):
            patch[key] = {**{k: None for k in old[key] if k not in value}, **value}
    return patch or None
