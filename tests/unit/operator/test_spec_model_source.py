"""spec.model.source: the image and s3 forms parse with their defaults, and every invalid form is
refused naming the field (the same rules the CRD carries; tests/e2e/test_model_source_validation.py
sends them to a real API server)."""

from __future__ import annotations

import pytest

from ocr_operator import spec as S

DIGEST = "sha256:" + "ab" * 32
REF = f"registry.example.com:5000/models/deepseek-ocr-2:v1@{DIGEST}"


def parse(model: dict):
    return S.parse({"image": "img", "model": model})


def test_an_image_source_defaults_to_pull_if_not_present():
    image = parse({"source": {"image": {"reference": REF}}}).model.source.image
    assert (image.reference, image.pull_policy) == (REF, "IfNotPresent")


def test_an_image_reference_without_a_tag_or_registry_is_accepted():
    ref = f"localhost/tiny@{DIGEST}"
    assert parse({"source": {"image": {"reference": ref}}}).model.source.image.reference == ref


def test_an_s3_source_reads_the_batch_location_fields_and_an_unset_cache():
    s3 = parse({"source": {"s3": {"url": "s3://models/ocr/", "credentialsSecret": "creds"}}}).model.source.s3
    assert (s3.url, s3.credentials_secret, s3.cache) == ("s3://models/ocr/", "creds", None)


def test_an_s3_cache_defaults_to_the_node_cache_under_var_lib():
    cache = parse({"source": {"s3": {"url": "s3://models/ocr/", "credentialsSecret": "c", "cache": {}}}}).model.source.s3.cache
    assert (cache.kind, cache.node_root, cache.max_bytes) == ("Node", "/var/lib/causalflow-ocr/models", None)


def test_a_spec_without_a_source_has_none():
    assert parse({"pvc": {"claimName": "w"}}).model.source is None


@pytest.mark.parametrize("model, field", [
    ({"source": {"image": {"reference": "registry.example.com/models/ocr:v1"}}}, "spec.model.source.image.reference"),
    ({"source": {"image": {"reference": f"registry.example.com/models/ocr@sha256:{'AB' * 32}"}}},
     "spec.model.source.image.reference"),
    ({"source": {"image": {"reference": f"registry.example.com/models/ocr@sha256:{'ab' * 31}"}}},
     "spec.model.source.image.reference"),
    ({"source": {"image": {"reference": REF, "pullPolicy": "Sometimes"}}}, "spec.model.source.image.pullPolicy"),
    ({"source": {"image": {}}}, "spec.model.source.image.reference"),
    ({"source": {}}, "spec.model.source needs exactly one of spec.model.source.image or spec.model.source.s3"),
    ({"source": {"image": {"reference": REF}, "s3": {"url": "s3://models/ocr/", "credentialsSecret": "c"}}},
     "spec.model.source needs exactly one of"),
    ({"source": {"s3": {"url": "https://models/ocr/", "credentialsSecret": "c"}}}, "spec.model.source.s3.url"),
    ({"source": {"s3": {"url": "s3://models/ocr/"}}}, "spec.model.source.s3.credentialsSecret"),
    ({"source": {"s3": {"url": "s3://models/", "credentialsSecret": "c", "cache": {"kind": "Disk"}}}},
     "spec.model.source.s3.cache.kind"),
    ({"source": {"s3": {"url": "s3://models/", "credentialsSecret": "c", "cache": {"nodeRoot": "var/x"}}}},
     "spec.model.source.s3.cache.nodeRoot"),
    ({"source": {"s3": {"url": "s3://models/", "credentialsSecret": "c", "cache": {"maxBytes": 0}}}},
     "spec.model.source.s3.cache.maxBytes"),
    ({"source": {"image": {"reference": REF}}, "pvc": {"claimName": "w"}}, "spec.model.source is mutually exclusive"),
    ({"source": {"image": {"reference": REF}}, "path": "/weights"}, "spec.model.source is mutually exclusive"),
])
def test_an_invalid_model_source_is_refused_naming_the_field(model, field):
    with pytest.raises(S.SpecError) as err:
        parse(model)
    assert field in str(err.value)
