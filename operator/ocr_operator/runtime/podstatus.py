"""What a Pod's status says about its scheduling, read the same way by every controller. Pure."""

from __future__ import annotations

from typing import Any, Mapping


def unschedulable(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's PodScheduled condition when the scheduler found no node for it (status False,
    reason Unschedulable; its message says why, e.g. "0/3 nodes are available: ..."), else None.
    A pod not yet looked at (no condition) or placed is not unschedulable."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled":
            return cond if cond.get("status") == "False" and cond.get("reason") == "Unschedulable" else None
    return None
