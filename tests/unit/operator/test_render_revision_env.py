"""The server learns its pod's revision (OCR_REVISION, the label of ocr_page_outcomes_total)."""

from __future__ import annotations

from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.render import render_all

from .helpers import owner, parsed


def test_the_server_reads_its_revision_from_the_pods_own_revision_label():
    body = owner(None)
    dep = render_all(body, parsed(body)).objects["Deployment"]
    template = dep["spec"]["template"]
    (env,) = [e for e in template["spec"]["containers"][0]["env"] if e["name"] == "OCR_REVISION"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": f"metadata.labels['{naming.REVISION_KEY}']"}}
    assert template["metadata"]["labels"][naming.REVISION_KEY]  # the label it reads is on every pod
