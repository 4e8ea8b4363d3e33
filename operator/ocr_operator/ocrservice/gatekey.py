"""The quality gate's key with spec.auth: a Secret the operator creates, owns and rotates.

A gated OcrService that requires API keys, or whose gate takes shadow pages (the serving pods are
armed with this key: PUT /v1/shadow), gets a Secret `<name>-gate-key` (ownerReference to the
OcrService, so garbage collection removes it). Its one entry holds the gate keys of three
consecutive rotation periods: the previous, the current and the next. The pods mount it whole
(GATE_KEY_FILE; kubelet updates the file in place, the server re-reads it while serving) and
accept these keys only on the gate's own requests to the pod (the server's http/gatekey.py).
The operator sends the current period's key.

Rotation: every ROTATION period (a day by default, OCR_OPERATOR_GATE_KEY_ROTATION_SECONDS) the
window moves on by one. The key the operator starts to send was already in the Secret a whole
period before, so the pods have it (kubelet's sync takes about a minute); a key leaves the Secret
a period after it was last sent. Each key is derived from the operator's seed (HMAC-SHA256 over
the OcrService's uid and the period's number): the operator never has to read a key back. The
seed is the file OCR_OPERATOR_GATE_KEY_SEED_FILE (the chart mounts one), else random for the
process: then a restarted operator writes new keys, and the gate waits (401 answers are asked
again) until kubelet brought them to the pods.

The operator never reads this Secret, nor any user Secret: it writes it with a JSON patch whose
first operation tests that the Secret's ownerReference is this OcrService (a same-named Secret of
someone else is refused by the API server and left as it is), and creates it when there is none.
Its RBAC on Secrets for this is create and patch.

Pure: `configmap.gate_key` (whether one is needed), `period_of`, `key_for`, `keys`, `render`; I/O: `seed`, `write`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
from dataclasses import dataclass
from typing import Any, Mapping

from ocr_operator.runtime.kube import ApiError, Kube
from . import naming
from .render import configmap

log = logging.getLogger(__name__)

SEED_ENV = "OCR_OPERATOR_GATE_KEY_SEED_FILE"
ROTATION_ENV = "OCR_OPERATOR_GATE_KEY_ROTATION_SECONDS"
DEFAULT_ROTATION_SECONDS = 86400
MIN_ROTATION_SECONDS = 600  # far above kubelet's Secret sync, so the next key is on the pods in time
DATA_KEY = configmap.GATE_KEY_ENTRY  # the entry the pods mount
# An unchanged Secret is written again this often (one PATCH): a deleted or edited one comes back.
REASSERT_SECONDS = 600
PREFIX = "gk-"


# ---------- pure ----------
def period_of(now: float, rotation_seconds: int) -> int:
    return int(now // rotation_seconds)


def key_for(seed: bytes, uid: str, period: int) -> str:
    return PREFIX + hmac.new(seed, f"{uid}/{period}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Keys:
    send: str  # the current period's key: what the gate sends
    file: str  # the Secret's entry: previous, current and next key, one a line


def keys(seed: bytes, uid: str, now: float, rotation_seconds: int) -> Keys:
    p = period_of(now, rotation_seconds)
    return Keys(key_for(seed, uid, p), "\n".join(key_for(seed, uid, q) for q in (p - 1, p, p + 1)) + "\n")


def render(owner: Mapping[str, Any], file: str) -> dict[str, Any]:
    md = naming.metadata(owner, naming.gate_key_name(owner["metadata"]["name"]))
    return {"apiVersion": "v1", "kind": "Secret", "metadata": md, "type": "Opaque",
            "data": {DATA_KEY: base64.b64encode(file.encode()).decode()}}


def patch_ops(owner_uid: str, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Test the ownership first: the API server applies none of it to a Secret not owned by `owner_uid`."""
    return [{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": owner_uid},
            {"op": "add", "path": "/data", "value": body["data"]}]


# ---------- I/O ----------
_seed: bytes | None = None
_written: dict[tuple[str, str], tuple[str, str, int]] = {}  # (ns, name) -> (uid, file, re-assert slot) last written


def seed(env: Mapping[str, str] = os.environ) -> bytes:
    global _seed
    if _seed is None:
        path = env.get(SEED_ENV)
        if path:
            with open(path, "rb") as f:
                _seed = f.read().strip()
        if not _seed:
            log.warning("%s unset: gate keys are derived from a random seed of this process and change when it "
                        "restarts", SEED_ENV)
            _seed = secrets.token_bytes(32)
    return _seed


def rotation_seconds(env: Mapping[str, str] = os.environ) -> int:
    return max(MIN_ROTATION_SECONDS, int(env.get(ROTATION_ENV) or DEFAULT_ROTATION_SECONDS))


def current(owner: Mapping[str, Any], now: float) -> Keys:
    return keys(seed(), owner["metadata"]["uid"], now, rotation_seconds())


async def write(kube: Kube, owner: Mapping[str, Any], k: Keys, now: float) -> str | None:
    """Write the keys into the OcrService's own gate-key Secret (created when missing); a message
    when a Secret of that name is someone else's (then nothing is written). One request per
    rotation and per REASSERT_SECONDS (the last write is remembered)."""
    md = owner["metadata"]
    ns, name, uid = md["namespace"], naming.gate_key_name(md["name"]), md["uid"]
    done = (uid, k.file, int(now // REASSERT_SECONDS))
    if _written.get((ns, name)) == done:
        return None
    body = render(owner, k.file)
    try:
        await kube.json_patch("Secret", ns, name, patch_ops(uid, body))
    except ApiError as exc:
        if exc.status != 404:
            return f"Secret {name} is not this OcrService's gate-key Secret (HTTP {exc.status}): left as it is"
        try:
            await kube.create("Secret", ns, body)
        except ApiError as exc2:
            if exc2.status == 409:  # created meanwhile: patched at the next reconcile
                return None
            raise
    _written[(ns, name)] = done
    return None


def forget(namespace: str, name: str) -> None:
    """The OcrService `name` is gone: its last write is no longer remembered (the Secret goes with it)."""
    _written.pop((namespace, naming.gate_key_name(name)), None)
