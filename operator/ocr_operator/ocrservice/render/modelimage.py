"""spec.model.source.image: the weights as a Kubernetes image volume, and which weights a pod
template runs (status.model, read from the Deployment's template: after a rollback that is the
last good revision's weights, not the failed spec's).

The kubelet pulls the OCI image or artifact once per node (containerd checks it by digest) and
mounts it read-only at the model directory the server loads, cacheDir/<name>: no copy, no init
container, no change to the server's settings. The reference is part of the pod template, so a
new reference is a new revision, gated and rolled back like any other change.
"""

from __future__ import annotations

import posixpath
from typing import Any, Mapping

from ocr_operator.spec import OcrServiceSpec

from . import modelfetch

WEIGHTS_VOLUME = "weights"  # the PVC's volume has this name too (deployment._volumes)
IMAGE, PVC, S3, SERVER_IMAGE = "image", "pvc", "s3", "serverImage"


def attach(spec: OcrServiceSpec, volumes: list[dict[str, Any]], mounts: list[dict[str, Any]]) -> None:
    """Add the image volume and its read-only mount at cacheDir/<name> (nothing without source.image)."""
    image = spec.model.source.image if spec.model.source is not None else None
    if image is None:
        return
    volumes.append({"name": WEIGHTS_VOLUME, "image": {"reference": image.reference, "pullPolicy": image.pull_policy}})
    mounts.append({"name": WEIGHTS_VOLUME, "mountPath": posixpath.join(spec.model.cache_dir, spec.model.name),
                   "readOnly": True})


def running_model(template: Mapping[str, Any]) -> dict[str, str]:
    """status.model of a pod template: where its weights come from (image, s3, pvc, or serverImage
    for weights inside the server image), the reference (image, S3 URL, claim or server image) and,
    for an image, its digest."""
    pod = template.get("spec") or {}
    for volume in pod.get("volumes") or ():
        if volume.get("name") != WEIGHTS_VOLUME:
            continue
        if "image" in volume:
            reference = volume["image"]["reference"]
            return {"source": IMAGE, "reference": reference, "digest": reference.rpartition("@")[2]}
        if "persistentVolumeClaim" in volume:
            return {"source": PVC, "reference": volume["persistentVolumeClaim"]["claimName"]}
    for container in pod.get("initContainers") or ():
        if container.get("name") == modelfetch.FETCH_CONTAINER:
            env = {e.get("name"): e.get("value") for e in container.get("env") or ()}
            return {"source": S3, "reference": env.get("FETCH_URL") or ""}
    containers = pod.get("containers") or ({},)
    return {"source": SERVER_IMAGE, "reference": containers[0].get("image") or ""}
