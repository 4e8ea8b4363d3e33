"""The OcrService CRD (generated from the typed models): structural, documented, validated, with the
subresources and columns."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ocr_operator.api.ocrservice import FIELD_FOR_ENV, spec_fields

ROOT = Path(__file__).resolve().parents[3]
CRD = yaml.safe_load((ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml").read_text())
VERSION = CRD["spec"]["versions"][0]
SCHEMA = VERSION["schema"]["openAPIV3Schema"]


def walk(node, path="spec"):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_the_api_is_ocrservice_v1alpha1_with_short_name_and_category():
    assert CRD["spec"]["group"] == "ocr.causalflow.dev"
    assert VERSION["name"] == "v1alpha1" and VERSION["served"] and VERSION["storage"]
    assert CRD["spec"]["names"]["shortNames"] == ["ocrs"]
    assert CRD["spec"]["names"]["categories"] == ["ocr"]


def test_every_spec_and_status_field_has_a_description():
    missing = []
    for root in ("spec", "status"):
        for path, node in walk(SCHEMA["properties"][root], root):
            leaf_of_map_or_list = path.endswith("{}") or (path.endswith("[]") and node.get("type") != "object")
            if not leaf_of_map_or_list and not node.get("description"):
                missing.append(path)
    assert missing == []


def test_spec_is_structural_without_blanket_preserve_unknown_fields():
    allowed = {"spec.affinity", "spec.env[].valueFrom", "status.rollout"}
    loose = [p for root in ("spec", "status") for p, n in walk(SCHEMA["properties"][root], root)
             if n.get("x-kubernetes-preserve-unknown-fields")]
    assert set(loose) <= allowed, loose
    assert not SCHEMA["properties"]["spec"].get("x-kubernetes-preserve-unknown-fields")


def test_status_and_scale_subresources_point_at_replicas_and_selector():
    assert VERSION["subresources"]["status"] == {}
    assert VERSION["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                                "statusReplicasPath": ".status.replicas",
                                                "labelSelectorPath": ".status.selector"}


def test_printer_columns_show_ready_reason_replicas_revision_age_and_wide_extras():
    cols = {c["name"]: c for c in VERSION["additionalPrinterColumns"]}
    assert list(cols)[:5] == ["Ready", "Reason", "Replicas", "Revision", "Age"]
    assert cols["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert cols["GPU-Util"]["priority"] == 1 and cols["Model"]["priority"] == 1


def test_every_cel_rule_has_a_message_naming_a_spec_field():
    rules = [r for _, n in walk(SCHEMA["properties"]["spec"]) for r in n.get("x-kubernetes-validations") or ()]
    assert len(rules) >= 10
    for rule in rules:
        assert "spec." in (rule.get("message") or ""), rule


def test_the_token_range_is_enforced_by_the_schema():
    inf = SCHEMA["properties"]["spec"]["properties"]["inference"]["properties"]
    for key in ("minVisualTokens", "maxVisualTokens"):
        assert (inf[key]["minimum"], inf[key]["maximum"]) == (256, 1120)


def test_every_field_that_sets_a_server_setting_has_its_bounds_and_default_from_ocr_limits():
    for path, f in spec_fields():
        s = f.api.setting
        if s is None:
            continue
        node = SCHEMA
        for part in path.split("."):
            node = node["properties"][part]
        assert (node.get("minimum"), node.get("maximum"), node.get("enum", [])) == (s.minimum, s.maximum,
                                                                                 list(s.choices)), path
        assert node.get("default") == s.default, path
        if s.env:
            assert s.env in node["description"], path


def test_the_token_cap_has_no_schema_default_since_it_follows_the_engine():
    inf = SCHEMA["properties"]["spec"]["properties"]["inference"]["properties"]
    assert "default" not in inf["maxVisualTokens"]
    assert "spec.engine" in inf["maxVisualTokens"]["description"]


def test_spec_env_refuses_every_setting_the_ocrservice_has_a_field_for():
    env_rules = SCHEMA["properties"]["spec"]["properties"]["env"]["items"]["x-kubernetes-validations"]
    refused = {re.fullmatch(r"self\.name != '(\w+)'", r["rule"]).group(1): r["message"]
               for r in env_rules if re.fullmatch(r"self\.name != '(\w+)'", r["rule"])}
    assert set(refused) == set(FIELD_FOR_ENV)
    for name, message in refused.items():
        assert name in message and FIELD_FOR_ENV[name] in message
