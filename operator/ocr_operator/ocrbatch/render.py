"""The objects an OcrBatch runs as (pure): its workers' configuration (a ConfigMap) and an Indexed
Job of the worker program (ocr_batch_worker, contract.COMMAND) in the operator's own image.

- One index per shard: completions = parallelism = spec.parallelism, completionMode Indexed; each
  index is retried alone (backoffLimitPerIndex), and an index whose worker exits
  contract.EXIT_FATAL (78: configuration, input unlistable, credentials refused, output unwritable)
  is failed at once (podFailurePolicy FailIndex), since a retry would fail the same way. Every
  other failed exit is retried: contract.EXIT_STORAGE (storage unavailable past
  limits.storageRetrySeconds), 1 (an uncaught exception), 137 (killed, e.g. out of memory). A pod
  deleted or evicted (DisruptionTarget) does not count as a failure: its index simply runs again
  and skips what it finished.
- spec.deadlineSeconds is the Job's activeDeadlineSeconds.
- The pods are "restricted" like the server's: non-root as the image's uid, no privilege
  escalation, read-only root filesystem (an emptyDir /tmp), no service-account token, and memory
  sized from limits.maxDocumentBytes (a worker holds at most contract.DOCUMENT_BUDGET times that
  at once).
- PVCs are mounted whole (the input read-only) and the spec's path is joined in the configuration;
  S3 credentials come from the Secrets as environment variables, never in the ConfigMap.

The batch's objects carry the operator's managed-by label (the label-filtered watches see them)
and LABEL_BATCH, but no app.kubernetes.io/instance: that label ties pods to an OcrService.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from ocr_batch_worker import contract
from ocr_operator import labels as L
from ocr_operator.api import ocrbatch
from ocr_operator.runtime.plan import controller_reference
from ocr_operator.spec import API_VERSION

from .kinds import OCRBATCH

KIND = OCRBATCH.kind
LABEL_BATCH = f"{L.PREFIX}/batch"
COMPONENT = "batch-worker"
CONTAINER = "worker"
CONFIG_DIR = "/etc/ocr-batch"
CONFIG_KEY = "config.json"
INPUT_MOUNT, OUTPUT_MOUNT, SHARED_MOUNT = "/batch/input", "/batch/output", "/batch/volume"
# The OcrService's API keys (its spec.auth Secret), when it requires them: the worker sends the first.
API_KEY_DIR = "/var/run/ocr-batch/auth"
API_KEY_FILE = f"{API_KEY_DIR}/api-keys"
# What the workers trust when the OcrService serves HTTPS (from its spec.tls Secret).
CA_DIR = "/var/run/ocr-batch/tls"
CA_FILE = f"{CA_DIR}/ca.crt"


@dataclass(frozen=True)
class Tls:
    """HTTPS to the OcrService: its certificate's Secret, the key in it to trust, the name to check."""

    secret: str
    trust_key: str  # ca.crt, or tls.crt for a self-signed certificate
    server_name: str


WORKER_UID = WORKER_GID = 65532  # Dockerfile.operator's ocr-operator user
BACKOFF_LIMIT_PER_INDEX = 3
BASE_MEMORY = 256 * 1024 * 1024  # the interpreter, pdfium, the client; documents come on top
S3_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
           ("AWS_ENDPOINT_URL", True), ("AWS_REGION", True))  # (key, optional)


@dataclass(frozen=True)
class WorkerSettings:
    """What the operator, not the OcrBatch, decides about the workers."""

    image: str
    image_pull_policy: str = "IfNotPresent"
    progress_interval: float = 10.0
    cpu: str = "250m"


def job_name(batch: str) -> str:
    return batch


def configmap_name(batch: str) -> str:
    return f"{batch}-batch"


def labels(batch: str) -> dict[str, str]:
    return {**L.common(COMPONENT), LABEL_BATCH: batch}


def owner_reference(batch: Mapping[str, Any]) -> dict[str, Any]:
    md = batch["metadata"]
    return controller_reference(API_VERSION, KIND, md["name"], md["uid"])


def _metadata(batch: Mapping[str, Any], name: str) -> dict[str, Any]:
    md = batch["metadata"]
    return {"name": name, "namespace": md["namespace"], "labels": labels(md["name"]),
            "ownerReferences": [owner_reference(batch)]}


def _same_claim(spec: Mapping[str, Any]) -> bool:
    i, o = spec["input"].get("pvc"), spec["output"].get("pvc")
    return bool(i and o and i["claimName"] == o["claimName"])


def _mounted(spec: Mapping[str, Any], role: str) -> str:
    """Where the worker finds the role's PVC directory: the claim's mount joined with the spec's path."""
    path = spec[role]["pvc"].get("path") or "/"
    root = SHARED_MOUNT if _same_claim(spec) else (INPUT_MOUNT if role == "input" else OUTPUT_MOUNT)
    return root if path == "/" else root + path


def _location(spec: Mapping[str, Any], role: str) -> dict[str, Any]:
    if "s3" in spec[role]:
        return {"s3": {"url": spec[role]["s3"]["url"]}}
    return {"pvc": {"path": _mounted(spec, role)}}


def worker_config(batch: Mapping[str, Any], service_url: str, settings: WorkerSettings,
                  api_key: bool = False, tls: Tls | None = None) -> dict[str, Any]:
    """The worker's JSON configuration (config.py's shape) for this batch; `api_key`: the OcrService
    requires one, mounted at API_KEY_FILE by render_job."""
    spec = batch["spec"]
    typed = ocrbatch.parse(spec)
    doc: dict[str, Any] = {
        "serviceUrl": service_url,
        "input": _location(spec, "input"),
        "output": _location(spec, "output"),
        "parallelism": typed.parallelism,
        "concurrencyPerWorker": typed.concurrency_per_worker,
        "progressIntervalSeconds": settings.progress_interval,
    }
    if spec.get("options"):
        doc["options"] = dict(spec["options"])
    if spec.get("limits"):
        doc["limits"] = dict(spec["limits"])
    if api_key:
        doc["apiKeyFile"] = API_KEY_FILE
    if tls is not None:
        doc["caFile"], doc["serverName"] = CA_FILE, tls.server_name
    return doc


def render_configmap(batch: Mapping[str, Any], service_url: str, settings: WorkerSettings,
                     api_key: bool = False, tls: Tls | None = None) -> dict[str, Any]:
    config = worker_config(batch, service_url, settings, api_key, tls)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _metadata(batch, configmap_name(batch["metadata"]["name"])),
            "data": {CONFIG_KEY: json.dumps(config, sort_keys=True, indent=1)}}


def memory_bytes(spec: ocrbatch.OcrBatchSpec) -> int:
    """The worker's memory: its base plus the documents it may hold at once (its budget.py)."""
    return BASE_MEMORY + contract.DOCUMENT_BUDGET * spec.limits.max_document_bytes


def _mi(n: int) -> str:
    return f"{-(-n // (1024 * 1024))}Mi"


def _s3_env(spec: Mapping[str, Any], role: str) -> list[dict[str, Any]]:
    s3 = spec[role].get("s3")
    if not s3:
        return []
    return [{"name": f"{role.upper()}_{key}",
             "valueFrom": {"secretKeyRef": {"name": s3["credentialsSecret"], "key": key,
                                            **({"optional": True} if optional else {})}}}
            for key, optional in S3_KEYS]


def _volumes(spec: Mapping[str, Any], config_map: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": config_map}},
                                     {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                                    {"name": "tmp", "mountPath": "/tmp"}]
    if _same_claim(spec):
        volumes.append({"name": "volume", "persistentVolumeClaim": {"claimName": spec["input"]["pvc"]["claimName"]}})
        mounts.append({"name": "volume", "mountPath": SHARED_MOUNT})
        return volumes, mounts
    for role, mount in (("input", INPUT_MOUNT), ("output", OUTPUT_MOUNT)):
        pvc = spec[role].get("pvc")
        if pvc:
            read_only = role == "input"
            volumes.append({"name": role, "persistentVolumeClaim": {"claimName": pvc["claimName"],
                                                                    **({"readOnly": True} if read_only else {})}})
            mounts.append({"name": role, "mountPath": mount, **({"readOnly": True} if read_only else {})})
    return volumes, mounts


def render_job(batch: Mapping[str, Any], settings: WorkerSettings, *,
               placement: Mapping[str, Any] | None = None, api_key: tuple[str, str] | None = None,
               tls: Tls | None = None) -> dict[str, Any]:
    """The Indexed Job. `placement` (nodeSelector, tolerations) is copied from the OcrService's pods,
    so workers run where its pods may (a tainted GPU pool included) unless the caller passes none.
    `api_key`: (Secret, key) of the OcrService's API keys, mounted read-only at API_KEY_FILE; `tls`:
    the certificate to trust, mounted at CA_FILE (the certificate only, never its private key)."""
    spec = batch["spec"]
    typed = ocrbatch.parse(spec)
    name = batch["metadata"]["name"]
    n = typed.parallelism
    volumes, mounts = _volumes(spec, configmap_name(name))
    if api_key is not None:
        secret, key = api_key
        volumes.append({"name": "api-keys", "secret": {"secretName": secret, "defaultMode": 0o440,
                                                       "items": [{"key": key, "path": "api-keys"}]}})
        mounts.append({"name": "api-keys", "mountPath": API_KEY_DIR, "readOnly": True})
    if tls is not None:
        volumes.append({"name": "service-ca", "secret": {"secretName": tls.secret, "defaultMode": 0o444,
                                                         "items": [{"key": tls.trust_key, "path": "ca.crt"}]}})
        mounts.append({"name": "service-ca", "mountPath": CA_DIR, "readOnly": True})
    memory = _mi(memory_bytes(typed))
    container = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(contract.COMMAND),
        "env": [{"name": contract.CONFIG_FILE_ENV, "value": f"{CONFIG_DIR}/{CONFIG_KEY}"},
                # The pod's name names its progress object: one per attempt of the index.
                {"name": contract.POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                *_s3_env(spec, "input"), *_s3_env(spec, "output")],
        "resources": {"requests": {"cpu": settings.cpu, "memory": memory}, "limits": {"memory": memory}},
        "volumeMounts": mounts,
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        # The worker writes its last progress report there (worker.write_termination_message).
        "terminationMessagePath": contract.TERMINATION_LOG,
        "terminationMessagePolicy": "File",
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",  # a failed index gets a new pod (backoffLimitPerIndex)
        "containers": [container],
        "volumes": volumes,
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 30,  # SIGTERM: the worker writes its progress and exits EXIT_TERMINATED
        "securityContext": {"runAsNonRoot": True, "runAsUser": WORKER_UID, "runAsGroup": WORKER_GID,
                            "fsGroup": WORKER_GID, "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"}},
    }
    for key in ("nodeSelector", "tolerations"):
        if placement and placement.get(key):
            pod_spec[key] = placement[key]
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": n,
        "parallelism": n,
        "backoffLimitPerIndex": BACKOFF_LIMIT_PER_INDEX,
        "podFailurePolicy": {"rules": [
            {"action": "FailIndex", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                                    "values": [contract.EXIT_FATAL]}},
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]},
        "template": {"metadata": {"labels": labels(name)}, "spec": pod_spec},
    }
    if typed.deadline_seconds:
        job_spec["activeDeadlineSeconds"] = typed.deadline_seconds
    if typed.suspend:  # created without pods (resumed by the controller's patch: decide.suspend_change)
        job_spec["suspend"] = True
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(batch, job_name(name)), "spec": job_spec}
