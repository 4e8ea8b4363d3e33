"""apps/v1 Deployment of the OCR server: GPUs, probes, config, weights volume, safe rollouts."""

from __future__ import annotations

import math
from typing import Any, Mapping

from ocr_limits import graceful_shutdown_seconds

from ocr_operator.runtime.plan import canonical_json
from ocr_operator.spec import OcrServiceSpec

from .. import naming
from . import configmap, modelfetch, modelimage

CONTAINER = "server"
CONFIG_HASH_KEY = f"{naming.PREFIX}/config-hash"
CHECKSUMS_KEY = f"{naming.PREFIX}/model-checksums"
TLS_DIR = "/etc/ocr/tls"
# The API keys' file: read-only, for its owner (root) and the pod's fsGroup (SERVER_GID: the server).
SECRET_MODE = 0o440
PRESTOP_SLEEP_SECONDS = 5
# The server's graceful shutdown waits for in-flight requests up to spec.inference.timeoutSeconds
# plus this margin before it exits.
# The /tmp emptyDir (HOME, the server's scratch files): bounded so a pod cannot fill its node's
# disk; beyond it the kubelet evicts the pod.
TMP_SIZE_LIMIT = "1Gi"
# Ephemeral storage the server container requests and may use: the /tmp emptyDir (counted
# against the pod's limit) plus room for its logs, which the kubelet rotates (10 MiB x 5 by
# default); the root filesystem is read-only. Request = limit: the node keeps room for all the pod
# may write, and beyond it the kubelet evicts the pod instead of the node running out of disk.
LOG_STORAGE_ALLOWANCE_MI = 512
EPHEMERAL_STORAGE = f"{1024 + LOG_STORAGE_ALLOWANCE_MI}Mi"  # 1024 Mi: TMP_SIZE_LIMIT
# The server image's user and group (Dockerfile.server: ocr, uid/gid 10001), stated in the pod so
# that files on the weights PVC are readable through fsGroup whatever user the image declares.
SERVER_UID = 10001
SERVER_GID = 10001


def _probe(path: str, spec: OcrServiceSpec, *, failure_threshold: int) -> dict[str, Any]:
    hc = spec.rollout.health_check
    return {
        "httpGet": {"path": path, "port": "http", "scheme": "HTTPS" if spec.tls_secret_name else "HTTP"},
        "periodSeconds": hc.period_seconds,
        "timeoutSeconds": hc.timeout_seconds,
        "failureThreshold": failure_threshold,
        "successThreshold": 1,
    }


def startup_failure_threshold(spec: OcrServiceSpec) -> int:
    """The startup probe's budget is modelLoadTimeoutSeconds, in probe periods (rounded up)."""
    period = spec.rollout.health_check.period_seconds
    return max(1, math.ceil(spec.rollout.model_load_timeout_seconds / period))


def _env(spec: OcrServiceSpec) -> list[dict[str, Any]]:
    env = configmap.server_env(spec)
    if spec.tls_secret_name:
        env += [{"name": "TLS_CERT_FILE", "value": f"{TLS_DIR}/tls.crt"},
                {"name": "TLS_KEY_FILE", "value": f"{TLS_DIR}/tls.key"}]
    env += [{"name": "HOME", "value": "/tmp"}, {"name": "HF_HUB_OFFLINE", "value": "1"}]
    # The pod's revision (its label, set after the template is hashed) labels ocr_page_outcomes_total.
    env += [{"name": "OCR_REVISION",
             "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{naming.REVISION_KEY}']"}}}]
    # User env last; a name the operator also sets is replaced in place (one entry per name).
    user = {e["name"]: dict(e) for e in spec.env}
    out = [user.pop(e["name"], e) for e in env]
    return out + [user[k] for k in (e["name"] for e in spec.env) if k in user]


def _resources(spec: OcrServiceSpec) -> dict[str, Any]:
    r = spec.resources
    requests: dict[str, Any] = {"cpu": r.cpu, "memory": r.memory, "ephemeral-storage": EPHEMERAL_STORAGE}
    # No CPU limit: CFS throttling a GPU server's feeder threads costs more than sharing spare CPU.
    limits: dict[str, Any] = {"memory": r.memory, "ephemeral-storage": EPHEMERAL_STORAGE}
    if r.gpus > 0:
        requests[r.gpu_resource_name] = str(r.gpus)
        limits[r.gpu_resource_name] = str(r.gpus)
    return {"requests": requests, "limits": limits}


def _volumes(spec: OcrServiceSpec, name: str) -> tuple[list[dict], list[dict]]:
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": naming.configmap_name(name)}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": configmap.CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    pvc = spec.model.pvc
    if pvc is not None:
        volumes.append({"name": "weights", "persistentVolumeClaim": {"claimName": pvc.claim_name, "readOnly": pvc.read_only}})
        mount: dict[str, Any] = {"name": "weights", "mountPath": spec.model.cache_dir, "readOnly": pvc.read_only}
        if pvc.sub_path:
            mount["subPath"] = pvc.sub_path
        mounts.append(mount)
    modelimage.attach(spec, volumes, mounts)  # spec.model.source.image: an image volume at cacheDir/<name>
    # Secrets as whole volumes, never subPath mounts: kubelet updates those files in place when the
    # Secret changes (a renewed certificate, rotated keys) and the server re-reads them.
    if spec.tls_secret_name:
        volumes.append({"name": "tls", "secret": {"secretName": spec.tls_secret_name}})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    if spec.auth is not None:
        volumes.append({"name": "api-keys", "secret": {
            "secretName": spec.auth.secret_name, "defaultMode": SECRET_MODE,
            "items": [{"key": spec.auth.key, "path": configmap.API_KEYS_FILE.rsplit("/", 1)[1]}]}})
        mounts.append({"name": "api-keys", "mountPath": configmap.AUTH_DIR, "readOnly": True})
    if configmap.gate_key(spec):  # the operator's own gate-key Secret (gatekey.py), rotated in place
        volumes.append({"name": "gate-key", "secret": {
            "secretName": naming.gate_key_name(name), "defaultMode": SECRET_MODE,
            "items": [{"key": configmap.GATE_KEY_ENTRY, "path": configmap.GATE_KEY_ENTRY}]}})
        mounts.append({"name": "gate-key", "mountPath": configmap.GATE_DIR, "readOnly": True})
    return volumes, mounts


def _tolerations(spec: OcrServiceSpec) -> list[dict[str, Any]]:
    out = [dict(t) for t in spec.tolerations]
    if spec.resources.gpus > 0 and not any(t.get("key") == spec.resources.gpu_resource_name for t in out):
        # GPU nodes are usually tainted with the resource name (what ExtendedResourceToleration adds).
        out.append({"key": spec.resources.gpu_resource_name, "operator": "Exists", "effect": "NoSchedule"})
    return out


def topology_spread(spec: OcrServiceSpec, name: str) -> list[dict[str, Any]]:
    """spec.topologySpreadConstraints as the pods get them: one without labelSelector counts this
    OcrService's pods (its selector labels), each revision apart (matchLabelKeys
    pod-template-hash, which the Deployment controller sets per ReplicaSet) unless it says otherwise."""
    out = []
    for given in spec.topology_spread_constraints:
        constraint = dict(given)
        if not constraint.get("labelSelector"):
            constraint["labelSelector"] = {"matchLabels": naming.selector_labels(name)}
            constraint.setdefault("matchLabelKeys", ["pod-template-hash"])
        out.append(constraint)
    return out


def has_prestop_sleep(spec: OcrServiceSpec) -> bool:
    """A preStop sleep only when the user's grace period leaves room for it (a grace period of
    PRESTOP_SLEEP_SECONDS or less asks for a quick stop)."""
    return spec.termination_grace_period_seconds > PRESTOP_SLEEP_SECONDS


def termination_grace_seconds(spec: OcrServiceSpec) -> int:
    """The pod's terminationGracePeriodSeconds: spec.terminationGracePeriodSeconds, raised to
    what a clean stop needs (the preStop sleep, then the server's graceful shutdown of
    ocr_limits.graceful_shutdown_seconds(timeoutSeconds)), so SIGKILL never cuts a request within
    its timeout."""
    needed = (PRESTOP_SLEEP_SECONDS if has_prestop_sleep(spec) else 0) \
        + graceful_shutdown_seconds(spec.inference.timeout_seconds)
    return max(spec.termination_grace_period_seconds, needed)


def pod_security_context() -> dict[str, Any]:
    """Pod Security Standards "restricted": non-root as the image's own uid/gid, RuntimeDefault
    seccomp. fsGroup makes the weights PVC readable by that group; OnRootMismatch changes the
    volume's ownership only when its root does not match already, not file by file on every
    start (a model directory holds many large files)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": SERVER_UID,
        "runAsGroup": SERVER_GID,
        "fsGroup": SERVER_GID,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def render_pod_template(owner: Mapping[str, Any], spec: OcrServiceSpec, *, config_hash: str) -> dict[str, Any]:
    """The pod template, stamped with its own revision (label and annotation)."""
    name = owner["metadata"]["name"]
    hc = spec.rollout.health_check
    volumes, mounts = _volumes(spec, name)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": spec.image,
        "imagePullPolicy": spec.image_pull_policy,
        "ports": [{"name": "http", "containerPort": spec.service.port, "protocol": "TCP"}],
        "env": _env(spec),
        "resources": _resources(spec),
        "startupProbe": _probe(hc.path, spec, failure_threshold=startup_failure_threshold(spec)),
        "readinessProbe": _probe(hc.path, spec, failure_threshold=hc.failure_threshold),
        "livenessProbe": _probe(hc.liveness_path, spec, failure_threshold=hc.failure_threshold),
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if has_prestop_sleep(spec):
        # Let endpoints drop the pod before SIGTERM, so no request lands on a stopping server.
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_SECONDS}}}
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": termination_grace_seconds(spec),
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(),
    }
    modelfetch.attach(spec, pod_spec, SERVER_UID, SERVER_GID)  # spec.model.source.s3: init containers, cache
    if spec.rollout.quality_gate is not None:
        # A new pod serves only once the quality gate passed its revision (gaterun.admit sets it).
        pod_spec["readinessGates"] = [{"conditionType": naming.GATE_CONDITION}]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    tolerations = _tolerations(spec)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    if spec.topology_spread_constraints:
        pod_spec["topologySpreadConstraints"] = topology_spread(spec, name)
    if spec.affinity:
        pod_spec["affinity"] = dict(spec.affinity)
    if spec.priority_class_name:
        pod_spec["priorityClassName"] = spec.priority_class_name
    if spec.runtime_class_name:
        pod_spec["runtimeClassName"] = spec.runtime_class_name
    if spec.service_account_name:
        pod_spec["serviceAccountName"] = spec.service_account_name
    if spec.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": s} for s in spec.image_pull_secrets]

    labels = {**dict(spec.pod_labels), **naming.labels(name)}
    annotations = {**dict(spec.pod_annotations), CONFIG_HASH_KEY: config_hash}
    if spec.model.checksums:
        annotations[CHECKSUMS_KEY] = canonical_json(dict(spec.model.checksums))
    template = {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod_spec}
    revision = naming.template_hash(template)
    template["metadata"]["labels"][naming.REVISION_KEY] = revision
    return template


def revision_of(template: Mapping[str, Any]) -> str:
    return template["metadata"]["labels"].get(naming.REVISION_KEY) or naming.template_hash(template)


def render(owner: Mapping[str, Any], spec: OcrServiceSpec, template: dict[str, Any], *,
           replicas: int) -> dict[str, Any]:
    """The Deployment running `template` (the desired one, or the last good one on rollback),
    at `replicas` pods: the operator always owns the size. With autoscaling on, the HPA decides it
    through the OcrService's scale subresource (spec.replicas), never on the Deployment itself,
    so a rollout or a rollback never fights the autoscaler for the field."""
    name = owner["metadata"]["name"]
    md = naming.metadata(owner, naming.deployment_name(name), {naming.REVISION_KEY: revision_of(template)})
    dspec: dict[str, Any] = {
        "selector": {"matchLabels": naming.selector_labels(name)},
        "revisionHistoryLimit": spec.rollout.revision_history_limit,
        "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
        # A new pod counts as available (and an old one may go) only after it stayed Ready for
        # the settle period: a revision that is Ready and then fails its health checks is rolled
        # back while the old pods still serve. The API requires it below progressDeadlineSeconds.
        "minReadySeconds": min(spec.rollout.settle_seconds, spec.rollout.progress_deadline_seconds - 1),
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": spec.rollout.max_surge, "maxUnavailable": spec.rollout.max_unavailable},
        },
        "replicas": replicas,
        "template": template,
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md, "spec": dspec}
