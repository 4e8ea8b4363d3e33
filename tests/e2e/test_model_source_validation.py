"""The API server itself rejects every invalid spec.model.source, with a message naming the field,
and accepts and defaults a valid one. No operator runs here: the CRD's schema and CEL rules."""

from __future__ import annotations

import uuid

import pytest
import yaml

from localcluster.waiting import wait_for
from tests.e2e.test_operator_validation import manifest

pytestmark = pytest.mark.e2e

DIGEST = "sha256:" + "ab" * 32
REF = f"registry.example.com:5000/models/deepseek-ocr-2:v1@{DIGEST}"
S3 = {"url": "s3://models/ocr/", "credentialsSecret": "model-store"}

INVALID = [
    ("an image without a digest", {"source": {"image": {"reference": "registry.example.com/models/ocr:v1" + "x" * 64}}},
     "spec.model.source.image.reference must be pinned by digest"),
    ("an uppercase digest", {"source": {"image": {"reference": "r.example.com/ocr@sha256:" + "AB" * 32}}},
     "spec.model.source.image.reference"),
    ("a short image reference", {"source": {"image": {"reference": "ocr:v1"}}}, "spec.model.source.image.reference"),
    ("an unknown pull policy", {"source": {"image": {"reference": REF, "pullPolicy": "Sometimes"}}},
     "spec.model.source.image.pullPolicy"),
    ("an image without a reference", {"source": {"image": {}}}, "spec.model.source.image.reference"),
    ("an empty source", {"source": {}},
     "spec.model.source needs exactly one of spec.model.source.image or spec.model.source.s3"),
    ("image and s3 at once", {"source": {"image": {"reference": REF}, "s3": S3}},
     "spec.model.source needs exactly one of spec.model.source.image or spec.model.source.s3"),
    ("an s3 URL that is not s3://", {"source": {"s3": {**S3, "url": "https://models/ocr/"}}}, "spec.model.source.s3.url"),
    ("s3 without credentials", {"source": {"s3": {"url": "s3://models/ocr/"}}},
     "spec.model.source.s3.credentialsSecret"),
    ("an unknown cache kind", {"source": {"s3": {**S3, "cache": {"kind": "Disk"}}}}, "spec.model.source.s3.cache.kind"),
    ("a relative node root", {"source": {"s3": {**S3, "cache": {"nodeRoot": "var/x"}}}},
     "spec.model.source.s3.cache.nodeRoot"),
    ("a zero cache bound", {"source": {"s3": {**S3, "cache": {"maxBytes": 0}}}}, "spec.model.source.s3.cache.maxBytes"),
    ("a source and a pvc", {"source": {"image": {"reference": REF}}, "pvc": {"claimName": "w"}},
     "spec.model.source is mutually exclusive with spec.model.pvc and spec.model.path"),
    ("a source and a path", {"source": {"image": {"reference": REF}}, "path": "/weights"},
     "spec.model.source is mutually exclusive with spec.model.pvc and spec.model.path"),
]


@pytest.fixture(scope="module")
def source_ns(cluster, ocr_crd):
    name = f"t-model-source-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("what, model, field", INVALID, ids=[i[0].replace(" ", "-") for i in INVALID])
def test_the_api_server_rejects_an_invalid_model_source_naming_the_field(cluster, source_ns, what, model, field):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    proc = cluster.kubectl("apply", "-n", source_ns, "-f", "-", input=yaml.safe_dump(manifest(name, {"model": model})),
                           check=False)
    assert proc.returncode != 0, f"{what}: accepted, but should be rejected"
    assert field in proc.stderr, f"{what}: message does not name {field!r}: {proc.stderr}"


def test_an_image_source_is_accepted_and_its_pull_policy_defaulted(cluster, source_ns):
    cluster.kubectl("apply", "-n", source_ns, "-f", "-",
                    input=yaml.safe_dump(manifest("from-image", {"model": {"source": {"image": {"reference": REF}}}})))
    obj = wait_for(lambda: yaml.safe_load(cluster.kubectl("get", "ocrs", "from-image", "-n", source_ns, "-o",
                                                          "yaml").stdout), timeout=10, message="the OcrService")
    assert obj["spec"]["model"]["source"] == {"image": {"reference": REF, "pullPolicy": "IfNotPresent"}}


def test_an_s3_source_with_an_empty_cache_is_accepted_with_the_node_cache_defaults(cluster, source_ns):
    cluster.kubectl("apply", "-n", source_ns, "-f", "-",
                    input=yaml.safe_dump(manifest("from-s3", {"model": {"source": {"s3": {**S3, "cache": {}}}}})))
    obj = wait_for(lambda: yaml.safe_load(cluster.kubectl("get", "ocrs", "from-s3", "-n", source_ns, "-o",
                                                          "yaml").stdout), timeout=10, message="the OcrService")
    assert obj["spec"]["model"]["source"]["s3"]["cache"] == {"kind": "Node",
                                                             "nodeRoot": "/var/lib/causalflow-ocr/models"}
