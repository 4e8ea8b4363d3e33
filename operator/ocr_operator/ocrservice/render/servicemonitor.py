"""monitoring.coreos.com/v1 ServiceMonitor (only when asked and its CRD exists)."""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from .. import naming

API_VERSION = "monitoring.coreos.com/v1"


def render(owner: Mapping[str, Any], spec: OcrServiceSpec) -> dict[str, Any] | None:
    sm = spec.service_monitor
    if not sm.enabled:
        return None
    name = owner["metadata"]["name"]
    md = naming.metadata(owner, naming.servicemonitor_name(name))
    # The operator's labels win: the watches select on them (spec validation refuses them too).
    md["labels"] = {**dict(sm.labels), **md["labels"]}
    endpoint: dict[str, Any] = {
        "port": "https" if spec.tls_secret_name else "http",
        "path": "/metrics",
        "interval": sm.interval,
    }
    if spec.tls_secret_name:
        endpoint["scheme"] = "https"
        endpoint["tlsConfig"] = {"insecureSkipVerify": True}
    return {
        "apiVersion": API_VERSION,
        "kind": "ServiceMonitor",
        "metadata": md,
        "spec": {
            "selector": {"matchLabels": naming.selector_labels(name)},
            "endpoints": [endpoint],
        },
    }
