"""Service in front of the server pods."""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from .. import naming


def render(owner: Mapping[str, Any], spec: OcrServiceSpec) -> dict[str, Any]:
    name = owner["metadata"]["name"]
    md = naming.metadata(owner, naming.service_name(name), dict(spec.service.annotations) or None)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": md,
        "spec": {
            "type": spec.service.type,
            "selector": naming.selector_labels(name),
            "ports": [{
                "name": "https" if spec.tls_secret_name else "http",
                "port": spec.service.port,
                "targetPort": "http",
                "protocol": "TCP",
                "appProtocol": "https" if spec.tls_secret_name else "http",
            }],
        },
    }


def url(owner: Mapping[str, Any], spec: OcrServiceSpec) -> str:
    md = owner["metadata"]
    scheme = "https" if spec.tls_secret_name else "http"
    return f"{scheme}://{naming.service_name(md['name'])}.{md['namespace']}.svc:{spec.service.port}"
