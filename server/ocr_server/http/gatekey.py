"""The quality gate's key (spec.auth with spec.rollout.qualityGate): who may use it, and where.

The operator owns a Secret of gate keys per OcrService and mounts it in the pods (GATE_KEY_FILE,
re-read like API_KEYS_FILE: credentials.py). A gate key is no API key: it opens only the gate's
own requests, the golden pages (GET /v1/golden, /v1/golden/{name}), POST /v1/ocr and shadow
pages (/v1/shadow: the gate's key only, never an API key), and only
when they are addressed to the pod itself (the Host is the pod's IP, POD_IP, as the operator
sends them), never through the Service. Anywhere else it is refused like any unknown key.

Pure: `matches`, `bearer`, `addressed_to_pod`.
"""

from __future__ import annotations

import hmac
from typing import Iterable


def matches(given: str, keys: Iterable[str]) -> bool:
    """Whether `given` is one of `keys`, compared in constant time against every key."""
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given.encode(), key.encode())
    return ok and bool(given)


def bearer(authorization: str) -> str:
    """The key of an `Authorization: Bearer <key>` header ('' for anything else)."""
    return authorization[7:].strip() if authorization.lower().startswith("bearer ") else ""


def addressed_to_pod(host: str | None, pod_ip: str | None) -> bool:
    """Whether a request's Host (without its port) is the pod's own IP. A server that does not
    know its IP (POD_IP unset: not run by the operator) takes no gate request."""
    if not host or not pod_ip:
        return False
    name = host.strip()
    if name.startswith("["):  # [v6]:port
        name = name[1:name.find("]")] if "]" in name else name[1:]
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    return name == pod_ip.strip()
