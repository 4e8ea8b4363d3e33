"""The OcrBatch CRD (generated from the typed models): structural, documented, bounded by
ocr_limits.batch, rules naming fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from ocr_limits import batch
from ocr_limits.prompts import MAX_PROMPT_CHARS, MODES
from ocr_operator.api import ocrbatch
from ocr_operator.api.codec import SpecError
from ocr_operator.api.fields import fields_of, rules_of

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
    ("stallSeconds", batch.DEFAULT_STALL_SECONDS, batch.MIN_STALL_SECONDS, batch.MAX_STALL_SECONDS),
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


# --- the typed spec: the operator's parse applies the same defaults and rules -------------------

BATCH = {"service": "invoices", "input": {"pvc": {"claimName": "docs", "path": "/in"}},
         "output": {"pvc": {"claimName": "docs", "path": "/out"}}}


def test_a_parsed_batch_has_every_default_the_crd_gives():
    spec = ocrbatch.parse(BATCH)
    assert (spec.parallelism, spec.concurrency_per_worker, spec.cancel) == (
        field("parallelism")["default"], field("concurrencyPerWorker")["default"], field("cancel")["default"])
    assert spec.limits.max_document_bytes == field("limits.maxDocumentBytes")["default"] == batch.DEFAULT_DOCUMENT_BYTES
    assert spec.limits.max_pages_per_document == field("limits.maxPagesPerDocument")["default"]
    assert spec.input.pvc.path == "/in" and ocrbatch.parse({**BATCH, "input": {"pvc": {"claimName": "d"}}}).input.pvc.path == "/"
    assert spec.options is None and spec.deadline_seconds is None


@pytest.mark.parametrize("change, message", [
    ({"input": {}}, "spec.input needs exactly one of spec.input.s3 or spec.input.pvc"),
    ({"output": {"pvc": {"claimName": "docs", "path": "/in/results"}}},
     "spec.output.pvc.path and spec.input.pvc.path must not contain one another on the same claim"),
    ({"input": {"s3": {"url": "s3://bucket/a/", "credentialsSecret": "s"}},
      "output": {"s3": {"url": "s3://bucket/a/b", "credentialsSecret": "s"}}},
     "spec.output.s3.url and spec.input.s3.url must not contain one another"),
    ({"options": {"mode": "free", "prompt": "Read it."}}, "spec.options.mode and spec.options.prompt are mutually exclusive"),
    ({"input": {"pvc": {"claimName": "docs", "path": "/a/../b"}}}, "must not contain . or .. parts"),
    ({"limits": {"maxDocumentBytes": batch.MAX_DOCUMENT_BYTES + 1}}, "spec.limits.maxDocumentBytes must be within"),
    ({"parallelism": 0}, "spec.parallelism must be within 1..64"),
    ({"options": {"mode": "latex"}}, "spec.options.mode must be one of markdown, free"),
])
def test_a_batch_the_crd_refuses_is_refused_by_parse_with_the_crds_message(change, message):
    with pytest.raises(SpecError, match=re.escape(message)):
        ocrbatch.parse({**BATCH, **change})


def test_every_rule_message_parse_gives_is_one_the_crd_holds():
    messages = {r["message"] for _, n in walk(SCHEMA, "") for r in n.get("x-kubernetes-validations") or ()}
    for rule in rules_of(ocrbatch.OcrBatchSpec) + rules_of(ocrbatch.Options):
        assert rule.message in messages


def test_the_transition_rules_are_left_to_the_api_server():
    transition = [r for r in rules_of(ocrbatch.OcrBatchSpec) if "oldSelf" in r.cel]
    assert len(transition) == 3 and all(r.holds is None for r in transition)
    assert ocrbatch.parse({**BATCH, "cancel": True}).cancel is True


def _bounded_fields(cls, prefix=""):
    for f in fields_of(cls):
        path = f"{prefix}{f.json}"
        if f.api.limit is not None:
            yield path, f.api.limit
        if f.type.kind == "object":
            yield from _bounded_fields(f.type.cls, f"{path}.")


def test_every_bound_the_worker_reads_in_ocr_limits_is_the_model_field_at_that_path():
    """The worker imports nothing of the operator, so it reads its bounds in ocr_limits.batch; each
    entry there is used by exactly the OcrBatch field it names, and so is the CRD's."""
    bounded = dict(_bounded_fields(ocrbatch.OcrBatchSpec))
    assert {path: s.field for path, s in bounded.items()} == {s.field: s.field for s in batch.BATCH_SETTINGS}
    for path, s in bounded.items():
        node = field(path)
        assert (node.get("default"), node.get("minimum"), node.get("maximum"), node.get("enum", [])) == (
            s.default, s.minimum, s.maximum, list(s.choices)), path


def test_the_workers_memory_is_read_from_the_typed_document_limit():
    from ocr_batch_worker import contract
    from ocr_operator.ocrbatch import render

    def memory(spec):
        job = render.render_job({"metadata": {"name": "b", "namespace": "n", "uid": "u"}, "spec": spec},
                                render.WorkerSettings(image="img"))
        return job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]

    mib = 1024 * 1024
    assert memory(BATCH) == f"{(render.BASE_MEMORY + contract.DOCUMENT_BUDGET * batch.DEFAULT_DOCUMENT_BYTES) // mib}Mi"
    assert memory({**BATCH, "limits": {"maxDocumentBytes": 10 * mib}}) == (
        f"{(render.BASE_MEMORY + contract.DOCUMENT_BUDGET * 10 * mib) // mib}Mi")
