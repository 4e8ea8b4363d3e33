"""spec.model.source: where the weights come from when they are neither on a PVC nor in the image.

`image`: an OCI image or artifact, pinned by digest, that the kubelet pulls once per node and
mounts read-only as an image volume (`volumes[].image`) at the model directory; no copy, no init
container. `s3`: an S3 prefix (the same shape as an OcrBatch's input), fetched by an init
container into a cache volume. spec.model.pvc and spec.model.path stay where they are.
"""

from __future__ import annotations

import re

from ocr_limits.outages import DEFAULT_FETCH_OUTAGE_SECONDS, MAX_FETCH_OUTAGE_SECONDS

from ..fields import Rule, api, model
from ..ocrbatch.batch import S3Location

# A distribution reference (registry/path[:tag]) that ends in @sha256:<64 hex>: the digest is what
# makes the volume, and the revision it is part of, name exactly one set of weights.
DIGEST_REFERENCE = (r"^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)*"
                    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?@sha256:[0-9a-f]{64}$")
PULL_POLICIES = ("IfNotPresent", "Always", "Never")
CACHE_KINDS = ("Node", "EmptyDir")
DEFAULT_NODE_ROOT = "/var/lib/causalflow-ocr/models"


@model
class ImageSource:
    reference: str = api(
        "OCI image or artifact holding the weights at its root (`python -m ocr_server.package DIR --tag REF` builds "
        "one, with model-checksums.json inside), pinned by digest: registry/name[:tag]@sha256:<64 hex>.",
        min_length=73, max_length=1024, required=True,
        rules=(Rule(f"self.matches('{DIGEST_REFERENCE}')",
                    "spec.model.source.image.reference must be pinned by digest: registry/name[:tag]@sha256:<64 "
                    "lowercase hex>", holds=lambda r: re.match(DIGEST_REFERENCE, r) is not None),))
    pull_policy: str = api("When the kubelet pulls the image: IfNotPresent (once per node), Always or Never (it "
                           "must already be on the node).", enum=PULL_POLICIES, default="IfNotPresent")


@model
class ModelCache:
    kind: str = api("Node: a hostPath cache under nodeRoot, keyed by the weights' checksums and shared by the pods "
                    "on the node; EmptyDir: the pod's own, fetched again by every new pod.", enum=CACHE_KINDS,
                    default="Node")
    node_root: str = api("Directory of the Node cache on the node.", pattern="^/.*", max_length=4096,
                         default=DEFAULT_NODE_ROOT)
    max_bytes: int | None = api("Bound of the cache in bytes: the Node cache evicts the least recently used "
                                "weights past it, an EmptyDir gets it as its sizeLimit.", minimum=1, format="int64")


@model
class S3Source(S3Location):
    credentials_secret: str = api(
        "Name of a Secret in this namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and optionally "
        "AWS_ENDPOINT_URL (a server other than AWS) and AWS_REGION; the model-fetch init container reads them as "
        "environment variables (the operator never reads the Secret).", min_length=1, max_length=253, required=True)
    cache: ModelCache | None = api("Where the fetched weights are kept (the Node cache when unset).")
    max_outage_seconds: int = api(
        "Longest S3 outage the model-fetch init container waits out (no answer, a 5xx, throttling; refused "
        "credentials, a missing object and a checksum mismatch fail at once): it tries again with a capped "
        "exponential backoff, writing why and the budget left into the ModelFetching condition, and past it fails "
        "the revision with ModelFetchFailed. Added to the fetch's bound and to a new pod's startup budget. 0: no "
        "waiting.", minimum=0, maximum=MAX_FETCH_OUTAGE_SECONDS, default=DEFAULT_FETCH_OUTAGE_SECONDS)


@model
class ModelSource:
    __rules__ = (Rule("has(self.image) != has(self.s3)",
                      "spec.model.source needs exactly one of spec.model.source.image or spec.model.source.s3",
                      holds=lambda s: (s.image is None) != (s.s3 is None)),)

    image: ImageSource | None = api("An OCI image or artifact mounted read-only as an image volume.")
    s3: S3Source | None = api("An S3 prefix fetched by an init container into a cache volume.")
