"""networking.k8s.io/v1 NetworkPolicy admitting the server port from the listed sources only (and,
with shadow pages, from the OcrService's own pods: the serving pods send their copies to the held one)."""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from .. import naming


def render(owner: Mapping[str, Any], spec: OcrServiceSpec) -> dict[str, Any] | None:
    np = spec.network_policy
    if not np.enabled:
        return None
    name = owner["metadata"]["name"]
    sources: list[dict[str, Any]] = []
    if np.allow_same_namespace:
        sources.append({"podSelector": {}})
    for ns in np.allowed_namespaces:
        sources.append({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}})
    for cidr in np.allowed_cidrs:
        sources.append({"ipBlock": {"cidr": cidr}})
    gate = spec.rollout.quality_gate
    if gate is not None and gate.shadow is not None:
        sources.append({"podSelector": {"matchLabels": naming.selector_labels(name)}})
    ingress: dict[str, Any] = {"ports": [{"protocol": "TCP", "port": spec.service.port}]}
    if sources:
        ingress["from"] = sources
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": naming.metadata(owner, naming.networkpolicy_name(name)),
        "spec": {
            "podSelector": {"matchLabels": naming.selector_labels(name)},
            "policyTypes": ["Ingress"],
            # No sources listed: nothing may connect (an explicit, visible deny).
            "ingress": [ingress] if sources else [],
        },
    }
