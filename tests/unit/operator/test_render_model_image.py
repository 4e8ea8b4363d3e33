"""spec.model.source.image's render (render/modelimage.py): a read-only image volume at the model
directory, the reference in the revision, and status.model read from the running template."""

from __future__ import annotations

import pytest

from ocr_operator.ocrservice.render import modelimage as MI
from ocr_operator.ocrservice.render import render_all

from .helpers import owner, parsed

REF = "registry.example.com/models/ocr:v1@sha256:" + "ab" * 32
REF2 = "registry.example.com/models/ocr:v2@sha256:" + "cd" * 32


def children(model: dict):
    body = owner({"model": model})
    return render_all(body, parsed(body))


def pod_spec(model: dict) -> dict:
    return children(model).objects["Deployment"]["spec"]["template"]["spec"]


def test_an_image_source_is_an_image_volume_with_its_reference_and_pull_policy():
    spec = pod_spec({"source": {"image": {"reference": REF, "pullPolicy": "Never"}}})
    volume = next(v for v in spec["volumes"] if v["name"] == MI.WEIGHTS_VOLUME)
    assert volume == {"name": "weights", "image": {"reference": REF, "pullPolicy": "Never"}}


def test_the_image_is_mounted_read_only_at_the_model_directory_the_server_loads():
    spec = pod_spec({"name": "deepseek-ai/DeepSeek-OCR-2", "cacheDir": "/models", "source": {"image": {"reference": REF}}})
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["name"] == MI.WEIGHTS_VOLUME)
    assert mount == {"name": "weights", "mountPath": "/models/deepseek-ai/DeepSeek-OCR-2", "readOnly": True}


def test_a_new_image_reference_is_a_new_revision():
    assert children({"source": {"image": {"reference": REF}}}).revision != \
        children({"source": {"image": {"reference": REF2}}}).revision


# Revisions rendered before spec.model.source existed (at d1553b2): an OcrService that does not use
# it keeps its pods.
@pytest.mark.parametrize("model, revision", [
    ({"pvc": {"claimName": "weights", "subPath": "w"}}, "c511ead7f6"),
    ({"path": "/opt/model"}, "0423810fe9"),
    ({}, "28d76fc6aa"),
])
def test_a_spec_without_a_source_keeps_its_revision(model, revision):
    assert children(model).revision == revision


def test_status_model_of_an_image_template_names_the_reference_and_its_digest():
    template = children({"source": {"image": {"reference": REF}}}).objects["Deployment"]["spec"]["template"]
    assert MI.running_model(template) == {"source": "image", "reference": REF, "digest": "sha256:" + "ab" * 32}


def test_status_model_of_a_pvc_template_names_the_claim():
    template = children({"pvc": {"claimName": "weights"}}).objects["Deployment"]["spec"]["template"]
    assert MI.running_model(template) == {"source": "pvc", "reference": "weights"}


def test_status_model_of_an_s3_template_names_the_url():
    template = children({"source": {"s3": {"url": "s3://models/ocr/", "credentialsSecret": "c"}}}
                        ).objects["Deployment"]["spec"]["template"]
    assert MI.running_model(template) == {"source": "s3", "reference": "s3://models/ocr/"}


def test_status_model_of_weights_inside_the_server_image_names_that_image():
    template = children({"path": "/opt/model"}).objects["Deployment"]["spec"]["template"]
    assert MI.running_model(template) == {"source": "serverImage",
                                          "reference": template["spec"]["containers"][0]["image"]}
