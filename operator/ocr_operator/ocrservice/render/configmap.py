"""ConfigMap with the server configuration (config.yaml: service / model / runtime sections).

What goes in config.yaml is the typed spec's settings under the keys the server reads
(ocr_operator.api.ocrservice.server_config, from the fields' ocr_limits settings)."""

from __future__ import annotations

import functools
import json
import posixpath
from typing import Any, Mapping

import yaml

from ocr_limits.quality import GATE_KEY_FILE_ENV, GOLDEN_DIR_ENV, POD_IP_ENV

from ocr_operator.api.ocrservice import server_config
from ocr_operator.runtime.plan import canonical_json, short_hash
from ocr_operator.spec import OcrServiceSpec

from .. import naming

CONFIG_KEY = "config.yaml"
CONFIG_DIR = "/etc/ocr"
CONFIG_PATH = f"{CONFIG_DIR}/{CONFIG_KEY}"
CHECKSUMS_KEY = "model-checksums.json"  # the file name ocr_server.checksums looks for beside CONFIG_FILE
# spec.auth's Secret is mounted here (deployment.py), its key as one file: the server re-reads it
# when kubelet updates the volume, so keys rotate without a restart (an env var never changes).
AUTH_DIR = "/etc/ocr/auth"
API_KEYS_FILE = f"{AUTH_DIR}/api-keys"
GATE_DIR = "/etc/ocr/gate"
GATE_KEY_ENTRY = "gate-keys"  # the gate-key Secret's one entry, also the file's name
GATE_KEY_FILE = f"{GATE_DIR}/{GATE_KEY_ENTRY}"


def server_env(spec: OcrServiceSpec) -> list[dict[str, Any]]:
    """The server's environment: where its configuration file is, and its API keys' file (a Secret).

    One channel for the configuration: every setting is in config.yaml (the ConfigMap), none
    repeated as an environment override, so the two can never disagree. `spec.env` may not set a
    setting the OcrService has a field for (the server lets the environment win over the file):
    the CRD and spec.parse refuse those names (ocr_operator.api.ocrservice.FIELD_FOR_ENV)."""
    out: list[dict[str, Any]] = [{"name": "CONFIG_FILE", "value": CONFIG_PATH}]
    if spec.auth is not None:
        out.append({"name": "API_KEYS_FILE", "value": API_KEYS_FILE})
    if (path := golden_dir(spec)) is not None:
        out.append({"name": GOLDEN_DIR_ENV, "value": path})
    if gate_key(spec):  # the gate's own key (ocrservice/gatekey.py), taken on the gate's requests to the pod
        out += [{"name": GATE_KEY_FILE_ENV, "value": GATE_KEY_FILE},
                {"name": POD_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    return out


def gate_key(spec: OcrServiceSpec) -> bool:
    """A gate key only where the gate must send one: a gated OcrService that requires API keys, or
    whose gate arms its serving pods for shadow pages (PUT /v1/shadow takes the gate key only)."""
    gate = spec.rollout.quality_gate
    return gate is not None and (spec.auth is not None or gate.shadow is not None)


def golden_dir(spec: OcrServiceSpec) -> str | None:
    """Where the pods see spec.rollout.qualityGate.goldenPages.pvcPath: inside the model volume,
    mounted (with its subPath) at spec.model.cacheDir. The server lists and serves the pages
    there (GET /v1/golden); the operator never mounts the PVC itself."""
    gate = spec.rollout.quality_gate
    if gate is None or gate.pvc_path is None or spec.model.pvc is None:
        return None
    return posixpath.join(spec.model.cache_dir, gate.pvc_path)


@functools.lru_cache(maxsize=1024)
def _config_yaml(config_json: str) -> str:
    """PyYAML's dump is pure Python, a tenth of a reconcile's CPU; the same spec renders the
    same file on every reconcile of the object, so it is dumped once."""
    return yaml.safe_dump(json.loads(config_json), sort_keys=True)


def config_yaml(spec: OcrServiceSpec) -> str:
    return _config_yaml(json.dumps(server_config(spec), sort_keys=True))


def render(owner: Mapping[str, Any], spec: OcrServiceSpec) -> dict[str, Any]:
    """config.yaml, and spec.model.checksums as model-checksums.json beside it: the server
    verifies the weights against it before loading (ocr_server/checksums.py)."""
    name = owner["metadata"]["name"]
    data = {CONFIG_KEY: config_yaml(spec)}
    if spec.model.checksums:
        data[CHECKSUMS_KEY] = canonical_json(dict(spec.model.checksums))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": naming.metadata(owner, naming.configmap_name(name)),
        "data": data,
    }


def config_hash(cm: Mapping[str, Any]) -> str:
    return short_hash(cm["data"])
