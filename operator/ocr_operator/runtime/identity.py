"""Who the operator is to the API server, handed to the runtime by the code that wires it.

The runtime writes with one field manager (server-side apply, and the User-Agent the audit log
attributes requests to), marks everything it creates with one label (so its label-filtered
watches and lists find it) and stamps what it applied with one annotation (plan.stamp): the
names are the product's, so the runtime takes them rather than writing them itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class Identity:
    field_manager: str  # server-side apply's field manager, the Events' reporting component
    version: str  # the operator's version, in the User-Agent
    managed_label: str  # label key every object the operator writes carries, with field_manager as its value
    applied_hash_key: str  # annotation key holding the hash of what the operator applied

    @property
    def user_agent(self) -> str:
        return f"{self.field_manager}/{self.version}"

    @property
    def selector(self) -> str:
        """The label selector of what the operator manages (lists and watches)."""
        return f"{self.managed_label}={self.field_manager}"

    def manages(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` carries the managed-by label (the label-filtered watches see it)."""
        labels = ((obj.get("metadata") or {}).get("labels") or {})
        return labels.get(self.managed_label) == self.field_manager

    def applied_hash(self, obj: Mapping[str, Any] | None) -> str | None:
        """The hash of what the operator last applied to `obj` (plan.stamp), if any."""
        return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(self.applied_hash_key)
