"""policy/v1 PodDisruptionBudget, only when more than one pod can exist."""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from .. import naming


def render(owner: Mapping[str, Any], spec: OcrServiceSpec) -> dict[str, Any] | None:
    if not spec.pdb.enabled or spec.max_pods <= 1:
        return None
    name = owner["metadata"]["name"]
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": naming.metadata(owner, naming.pdb_name(name)),
        "spec": {
            "maxUnavailable": spec.pdb.max_unavailable,
            "selector": {"matchLabels": naming.selector_labels(name)},
            # Unready pods (still loading the model) may always be evicted: a drain never waits on them.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
