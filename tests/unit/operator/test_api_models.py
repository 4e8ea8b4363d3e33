"""The vocabulary of the typed API models (ocr_operator.api): one field definition gives the schema
node, the Python default, the parse and its errors."""

from __future__ import annotations

from typing import Any, Mapping

import pytest

from ocr_limits import setting
from ocr_operator import spec as S
from ocr_operator.api.codec import SpecError, dump, parse
from ocr_operator.api.fields import Constraints, Quantity, Rule, api, model
from ocr_operator.api.openapi import object_schema


@model
class Ref:
    __description__ = "A reference."

    name: str = api("Its name.", min_length=1, required=True)


@model
class Part:
    size: int = api("A size.", minimum=1, maximum=10, default=2)
    cpu: Quantity = api("A quantity.", default="1")


@model
class Thing:
    __rules__ = (Rule("self.part.size < 9", "spec.part.size must be < 9", holds=lambda t: t.part.size < 9),)

    port: int = api("The port ({env}).", setting="PORT")
    part: Part = api("A part.", default={})
    labels: tuple[tuple[str, str], ...] = api("Labels.", max_properties=2, item=Constraints(max_length=3))
    refs: tuple[str, ...] = api("Refs.", via=(Ref, "name"))
    ref: str | None = api(json="single", via=(Ref, "name"))
    extra: Mapping[str, Any] | None = api("As written.", shape=Part)


def test_a_field_that_sets_a_server_setting_takes_its_default_bounds_and_env_name_from_ocr_limits():
    node = object_schema(Thing)["properties"]["port"]
    s = setting("PORT")
    assert (node["default"], node["minimum"], node["maximum"]) == (s.default, s.minimum, s.maximum)
    assert node["description"] == "The port (PORT)."
    assert Thing(part=Part()).port == s.default
    with pytest.raises(AssertionError, match="come from ocr_limits"):
        api("x", setting="PORT", maximum=5)


def test_the_python_defaults_follow_the_schema_object_defaults_and_empty_collections():
    thing = Thing()
    assert thing.part == Part(size=2, cpu="1") and thing.labels == () and thing.refs == () and thing.ref is None
    node = object_schema(Thing)
    assert node["properties"]["part"]["default"] == {} and "default" not in node["properties"]["labels"]


def test_the_schema_says_each_types_wire_form():
    props = object_schema(Thing)["properties"]
    assert props["part"]["properties"]["cpu"] == {"x-kubernetes-int-or-string": True, "default": "1",
                                                 "description": "A quantity."}
    assert props["labels"]["additionalProperties"] == {"type": "string", "maxLength": 3}
    assert props["refs"]["items"]["required"] == ["name"] and props["refs"]["items"]["description"] == "A reference."
    assert props["single"]["description"] == "A reference." and props["extra"]["properties"]["size"]["maximum"] == 10
    assert object_schema(Thing)["x-kubernetes-validations"] == [{"rule": "self.part.size < 9",
                                                                 "message": "spec.part.size must be < 9"}]


def test_parse_reads_the_wire_names_into_python_values():
    thing = parse(Thing, {"port": 80, "part": {"cpu": 2}, "labels": {"b": "1", "a": "2"}, "refs": [{"name": "r"}],
                          "single": {"name": "s"}, "extra": {"size": 3, "other": True}})
    assert (thing.part.cpu, thing.labels, thing.refs, thing.ref) == ("2", (("a", "2"), ("b", "1")), ("r",), "s")
    assert thing.extra == {"size": 3, "other": True}  # kept as written, checked against its shape
    assert dump(thing) == {"port": 80, "part": {"size": 2, "cpu": "2"}, "labels": {"a": "2", "b": "1"},
                           "refs": [{"name": "r"}], "single": {"name": "s"}, "extra": {"size": 3, "other": True}}
    assert parse(Thing, dump(thing)) == thing


def test_a_null_is_read_as_absent_as_the_api_server_prunes_it():
    assert parse(Thing, {"port": None, "part": None, "single": None}) == Thing()


def test_a_value_of_the_wrong_type_stops_the_parse_naming_the_field():
    with pytest.raises(SpecError, match=r"^spec.part.size must be an integer, got True$"):
        parse(Thing, {"part": {"size": True}})
    with pytest.raises(SpecError, match=r"^spec.refs\[0\].name is required$"):
        parse(Thing, {"refs": [{}]})


def test_every_bound_and_rule_that_fails_is_named_in_one_error():
    with pytest.raises(SpecError) as err:
        parse(Thing, {"port": 0, "part": {"size": 10}, "labels": {"a": "long", "b": "", "c": ""},
                      "extra": {"size": 0}})
    message = str(err.value)
    assert message.count("; ") == 4
    for part in ("spec.port must be within 1..65535, got 0", "spec.part.size must be < 9",
                 "spec.labels.a is longer than 3 characters", "spec.labels has more than 2 entries",
                 "spec.extra.size must be within 1..10, got 0"):
        assert part in message


def test_validate_checks_a_spec_built_in_code_like_a_parsed_one():
    S.validate(S.OcrServiceSpec(image="img"))
    with pytest.raises(SpecError, match="spec.inference.batchSize must be within 1..64, got 65"):
        S.validate(S.OcrServiceSpec(image="img", inference=S.Inference(batch_size=65)))


def test_a_rich_ocrservice_spec_survives_dump_and_parse():
    spec = S.parse({"image": "img", "engine": "vllm", "imagePullSecrets": [{"name": "regcred"}],
                    "model": {"pvc": {"claimName": "w"}, "checksums": {"a": "0" * 64}},
                    "autoscaling": {"schedules": [{"name": "n", "start": "22:00", "end": "06:00", "minReplicas": 0}],
                                    "behavior": {"scaleDown": {"selectPolicy": "Min"}}},
                    "rollout": {"qualityGate": {"goldenPages": {"pvcPath": "golden"}}}, "tls": {"secretName": "t"},
                    "monitoring": {"prometheusRule": {"enabled": True}}, "env": [{"name": "LOG_LEVEL", "value": "x"}]})
    assert (spec.image_pull_secrets, spec.tls_secret_name, spec.prometheus_rule.enabled) == (("regcred",), "t", True)
    assert spec.rollout.quality_gate.pvc_path == "golden" and spec.rollout.quality_gate.config_map is None
    assert S.parse(dump(spec)) == spec
