"""spec.model.source.s3: the pod's `model-fetch` init container and its cache volume.

The init container is the server image itself (`python -m ocr_server.fetch`: no other image to
pull or trust). It gets the credentials Secret's keys as environment variables through
secretKeyRef (the kubelet reads the Secret, the operator never does), the ConfigMap's
model-checksums.json (spec.model.checksums) when the OcrService lists them, and the cache:

- kind Node: a hostPath (DirectoryOrCreate) at cache.nodeRoot, shared by the pods of the node; the
  fetcher keys it by the checksum list's digest, locks a key against a second pod fetching it, and
  evicts least recently used keys past cache.maxBytes, never one a server of the node holds (the
  server locks the key its model directory links to: ocr_server/runtime/modelcache.py). The kubelet
  creates the directory as root, so a first init container (`model-cache-owner`, root with CAP_CHOWN
  alone) hands it to the server's user when it is not theirs already; a hostPath volume already
  needs a namespace that allows it (Pod Security "privileged");
- kind EmptyDir: the pod's own emptyDir (fetched again by every new pod), bounded by cache.maxBytes,
  which is added to the server container's ephemeral storage so the kubelet does not evict the pod
  for holding its weights.

The server sees the weights at spec.model.cacheDir/<name>: a small emptyDir there holds the symlink
the fetcher makes to the published key in the cache, both mounted read-only in the server.
"""

from __future__ import annotations

import posixpath
from typing import Any

from ocr_limits.outages import DEFAULT_FETCH_OUTAGE_SECONDS

from ocr_operator.spec import OcrServiceSpec

from . import configmap

FETCH_CONTAINER = "model-fetch"  # rollout/fetching.py reads it by this name
OWNER_CONTAINER = "model-cache-owner"
CACHE_VOLUME = "model-cache"
LINK_VOLUME = "model-link"
CACHE_MOUNT = "/var/cache/causalflow-ocr/models"
NODE = "Node"
EMPTY_DIR = "EmptyDir"
# The fetch's bound without outages; FETCH_TIMEOUT_SECONDS is it plus spec.model.source.s3.maxOutageSeconds
# (the longest S3 outage the fetcher waits out), also added to a new pod's startup budget (Policy.fetch_seconds).
FETCH_TIMEOUT_SECONDS = 1800
STALL_SECONDS = 120
LINK_SIZE_LIMIT = "1Mi"
SECRET_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False), ("AWS_ENDPOINT_URL", True),
               ("AWS_REGION", True))
# The fetcher's own resources: its ranged GETs in flight (8, read in 256 KiB pieces) and the hashing threads.
FETCH_RESOURCES = {"cpu": "500m", "memory": "512Mi"}


def s3_source(spec: OcrServiceSpec) -> Any | None:
    source = getattr(spec.model, "source", None)
    return getattr(source, "s3", None) if source is not None else None


def _max_outage(s3: Any) -> int:
    value = getattr(s3, "max_outage_seconds", None)
    return DEFAULT_FETCH_OUTAGE_SECONDS if value is None else int(value)


def fetch_seconds(spec: OcrServiceSpec) -> float:
    """The fetch's whole bound (FETCH_TIMEOUT_SECONDS): a transfer's and the outage budget's."""
    s3 = s3_source(spec)
    return float(FETCH_TIMEOUT_SECONDS + _max_outage(s3)) if s3 is not None else 0.0


DEFAULT_NODE_ROOT = "/var/lib/causalflow-ocr/models"


def _kind(s3: Any) -> str:
    return getattr(s3.cache, "kind", None) or NODE


def _node_root(s3: Any) -> str:
    return getattr(s3.cache, "node_root", None) or DEFAULT_NODE_ROOT


def _max_bytes(s3: Any) -> int:
    return int(getattr(s3.cache, "max_bytes", None) or 0)


def _security(uid: int, gid: int) -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]},
            "runAsUser": uid, "runAsGroup": gid, "runAsNonRoot": True}


def volumes(spec: OcrServiceSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The cache and link volumes, and the server container's read-only mounts of them."""
    s3 = s3_source(spec)
    if s3 is None:
        return [], []
    if _kind(s3) == NODE:
        cache: dict[str, Any] = {"name": CACHE_VOLUME, "hostPath": {"path": _node_root(s3),
                                                                   "type": "DirectoryOrCreate"}}
    else:
        cache = {"name": CACHE_VOLUME, "emptyDir": {}}
        if _max_bytes(s3):
            cache["emptyDir"]["sizeLimit"] = str(_max_bytes(s3))
    link = {"name": LINK_VOLUME, "emptyDir": {"sizeLimit": LINK_SIZE_LIMIT}}
    mounts = [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT, "readOnly": True},
              {"name": LINK_VOLUME, "mountPath": spec.model.cache_dir, "readOnly": True}]
    return [cache, link], mounts


def _env(spec: OcrServiceSpec, s3: Any) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "FETCH_URL", "value": s3.url},
        {"name": "FETCH_CACHE_DIR", "value": CACHE_MOUNT},
        {"name": "FETCH_LINK", "value": posixpath.join(spec.model.cache_dir, spec.model.name)},
        {"name": "FETCH_TIMEOUT_SECONDS", "value": str(int(fetch_seconds(spec)))},
        {"name": "FETCH_STALL_SECONDS", "value": str(STALL_SECONDS)},
        {"name": "FETCH_MAX_OUTAGE_SECONDS", "value": str(_max_outage(s3))},
        {"name": "HOME", "value": "/tmp"},
    ]
    if spec.model.checksums:
        env.append({"name": "FETCH_CHECKSUMS_FILE", "value": f"{configmap.CONFIG_DIR}/{configmap.CHECKSUMS_KEY}"})
    if _kind(s3) == NODE and _max_bytes(s3):
        env.append({"name": "FETCH_CACHE_MAX_BYTES", "value": str(_max_bytes(s3))})
    for key, optional in SECRET_KEYS:
        ref: dict[str, Any] = {"name": s3.credentials_secret, "key": key}
        if optional:
            ref["optional"] = True
        env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    return env


def init_containers(spec: OcrServiceSpec, server: dict[str, Any], uid: int, gid: int) -> list[dict[str, Any]]:
    """The init containers before `server` (the rendered server container, whose image and
    ephemeral storage they share)."""
    s3 = s3_source(spec)
    if s3 is None:
        return []
    # The server's ephemeral storage, limit included or left out alike: the kubelet bounds a pod by
    # the larger of its init containers' limits and the sum of the others'.
    requests, limits = server["resources"]["requests"], server["resources"]["limits"]
    resources = {"requests": {**FETCH_RESOURCES, "ephemeral-storage": requests["ephemeral-storage"]},
                 "limits": {"memory": "1Gi", **{k: v for k, v in limits.items() if k == "ephemeral-storage"}}}
    fetch = {
        "name": FETCH_CONTAINER, "image": server["image"], "imagePullPolicy": server["imagePullPolicy"],
        "command": ["python", "-m", "ocr_server.fetch"], "env": _env(spec, s3), "resources": resources,
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT},
                         {"name": LINK_VOLUME, "mountPath": spec.model.cache_dir},
                         {"name": "config", "mountPath": configmap.CONFIG_DIR, "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": _security(uid, gid),
        # The fetcher's reason (ModelFetchFailed, ChecksumMismatch) and message, for rollout/fetching.py.
        "terminationMessagePolicy": "File",
    }
    if _kind(s3) != NODE:
        return [fetch]
    owner = {
        "name": OWNER_CONTAINER, "image": server["image"], "imagePullPolicy": server["imagePullPolicy"],
        "command": ["python", "-c", "import os, sys; p = sys.argv[1]; s = os.stat(p); "
                    f"(s.st_uid, s.st_gid) == ({uid}, {gid}) or os.chown(p, {uid}, {gid})", CACHE_MOUNT],
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_MOUNT}],
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
                            "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False},
    }
    return [owner, fetch]


def adjust_server(spec: OcrServiceSpec, server: dict[str, Any]) -> None:
    """An EmptyDir cache counts against the pod's ephemeral storage: its bound is added to the
    server's request and limit; without a bound the limit goes (the node's own pressure eviction
    still applies) rather than the pod being evicted for its weights."""
    s3 = s3_source(spec)
    if s3 is None or _kind(s3) == NODE:
        return
    res = server["resources"]
    if _max_bytes(s3):
        mib = int(res["requests"]["ephemeral-storage"].removesuffix("Mi")) + -(-_max_bytes(s3) // (1 << 20))
        res["requests"]["ephemeral-storage"] = res["limits"]["ephemeral-storage"] = f"{mib}Mi"
    else:
        res["limits"].pop("ephemeral-storage", None)


def attach(spec: OcrServiceSpec, pod_spec: dict[str, Any], uid: int, gid: int) -> None:
    """deployment.py's hook: with spec.model.source.s3, the init containers, the volumes and the
    server container's mounts (the server is the pod's first container)."""
    if s3_source(spec) is None:
        return
    server = pod_spec["containers"][0]
    adjust_server(spec, server)
    new_volumes, mounts = volumes(spec)
    pod_spec["volumes"] = [*pod_spec["volumes"], *new_volumes]
    server["volumeMounts"] = [*server["volumeMounts"], *mounts]
    pod_spec["initContainers"] = init_containers(spec, server, uid, gid)
