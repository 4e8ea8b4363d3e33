"""The OcrBatch CRD (generated from the typed models): structural, documented, bounded by
ocr_limits.batch, rules naming fields."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ocr_limits import batch
from ocr_limits.prompts import MAX_PROMPT_CHARS, MODES

ROOT = Path(__file__).resolve().parents[3]
PATH = ROOT / "crds" / "ocr.causalflow.dev_ocrbatches.yaml"
CRD = yaml.safe_load(PATH.read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def walk(node, path):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")


def field(path: str) -> dict:
    node = SCHEMA["properties"]["spec"]
    for part in path.split("."):
        node = node["properties"][part]
    return node


def test_the_api_is_a_namespaced_ocrbatch_v1alpha1_with_a_status_subresource():
    assert CRD["metadata"]["name"] == "ocrbatches.ocr.causalflow.dev" and CRD["spec"]["scope"] == "Namespaced"
    assert CRD["spec"]["names"]["kind"] == "OcrBatch" and CRD["spec"]["names"]["categories"] == ["ocr"]
    assert VERSION["name"] == "v1alpha1" and VERSION["subresources"] == {"status": {}}


def test_printer_columns_show_service_phase_pages_failed_and_age():
    cols = [c["name"] for c in VERSION["additionalPrinterColumns"] if not c.get("priority")]
    assert cols == ["Service", "Phase", "Pages", "Failed", "Age"]


def test_every_spec_and_status_field_has_a_description():
    missing = [p for root in ("spec", "status") for p, n in walk(SCHEMA["properties"][root], root)
               if not n.get("description")]
    assert missing == []


def test_the_schema_is_structural_without_preserve_unknown_fields():
    assert not [p for p, n in walk(SCHEMA, "") if n.get("x-kubernetes-preserve-unknown-fields")]


def test_every_cel_rule_has_a_message_naming_a_field():
    rules = [r for _, n in walk(SCHEMA, "") for r in n.get("x-kubernetes-validations") or ()]
    assert len(rules) >= 8
    for rule in rules:
        assert "spec." in rule["message"] or "metadata.name" in rule["message"], rule


@pytest.mark.parametrize("path, default, low, high", [
    ("parallelism", 1, 1, batch.MAX_PARALLELISM),
    ("concurrencyPerWorker", 4, 1, batch.MAX_CONCURRENCY),
    ("deadlineSeconds", None, batch.MIN_DEADLINE_SECONDS, batch.MAX_DEADLINE_SECONDS),
    ("options.maxNewTokens", None, 1, batch.MAX_NEW_TOKENS),
    ("limits.maxDocumentBytes", batch.DEFAULT_DOCUMENT_BYTES, 1, batch.MAX_DOCUMENT_BYTES),
    ("limits.maxPagesPerDocument", batch.DEFAULT_PAGES_PER_DOCUMENT, 1, batch.MAX_PAGES_PER_DOCUMENT),
    ("limits.maxDocuments", batch.DEFAULT_DOCUMENTS, 1, batch.MAX_DOCUMENTS),
])
def test_the_bounds_and_defaults_are_the_ones_ocr_limits_batch_holds(path, default, low, high):
    node = field(path)
    assert (node.get("default"), node["minimum"], node["maximum"]) == (default, low, high)


def test_the_mode_and_prompt_bounds_are_the_servers():
    assert field("options.mode")["enum"] == list(MODES)
    assert field("options.prompt")["maxLength"] == MAX_PROMPT_CHARS


def test_input_and_output_take_the_same_locations():
    assert field("input")["properties"] == field("output")["properties"]
    assert set(field("input")["properties"]) == {"s3", "pvc"}
