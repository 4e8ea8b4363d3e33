"""status.model: the weights of the template the Deployment runs, not of the spec (after a rollback
the spec names the failed image while the pods run the last good one)."""

from __future__ import annotations

from ocr_operator.api.ocrservice import OCRSERVICE

from .helpers import owner
from .test_status import build, deployment

GOOD = "registry.example.com/models/ocr:v1@sha256:" + "ab" * 32
FAILED = "registry.example.com/models/ocr:v2@sha256:" + "cd" * 32


def running(reference: str) -> dict:
    dep = deployment()
    dep["spec"]["template"] = {"spec": {"containers": [{"name": "server", "image": "srv"}],
                                        "volumes": [{"name": "weights", "image": {"reference": reference}}]}}
    return dep


def test_after_a_rollback_status_model_shows_the_running_image_not_the_specs():
    body = owner({"model": {"source": {"image": {"reference": FAILED}}}})
    st, _ = build(body, deployment=running(GOOD))
    assert st["model"] == {"source": "image", "reference": GOOD, "digest": "sha256:" + "ab" * 32}


def test_the_wide_listing_shows_the_running_source_and_digest():
    columns = {c.name: c.json_path for c in OCRSERVICE.columns}
    assert (columns["Source"], columns["Model-Digest"]) == (".status.model.source", ".status.model.digest")
