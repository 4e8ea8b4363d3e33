"""One metric naming scheme across the product: every metric name the shipped prometheus-adapter
rules, the CRD (defaults, descriptions, CEL rules) and the operator's autoscaling code name is
one the server or the operator really exports, or a documented exporter's (promql_names.KNOWN);
and every metric an HPA of the operator can ask for is served by a shipped adapter rule.
(The alert rules and the dashboard are checked the same way in test_dashboard_and_names.py.)"""

from __future__ import annotations

import re

import yaml

from ocr_operator import spec
from ocr_operator.metrics import NAMES as OPERATOR_NAMES
from tests.monitoring.common import CHART, ROOT
from tests.monitoring.promql_names import KNOWN, metric_names

ADAPTER_VALUES = CHART / "files" / "prometheus-adapter-values.yaml"
CRD = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
# How a metric name looks in prose: a known exporter's prefix and at least one more word.
NAME_IN_TEXT = re.compile(r"\b(?:ocr_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b(?![.\w])")  # not a module (ocr_server.x)


def adapter_rules() -> list[dict]:
    return yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]


def crd_strings() -> list[str]:
    out: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str):
            out.append(node)
    walk(yaml.safe_load(CRD.read_text()))
    return out


def test_every_name_in_the_adapter_rules_is_exported_and_served_under_its_own_name():
    for rule in adapter_rules():
        [name] = metric_names(rule["seriesQuery"])
        assert name in KNOWN, name
        assert rule["name"]["as"] == name, "the HPA asks for the exported name: no renaming"


def test_every_metric_name_the_crd_mentions_is_exported():
    mentioned = {m for text in crd_strings() for m in NAME_IN_TEXT.findall(text)}
    assert {"DCGM_FI_DEV_GPU_UTIL", "ocr_gpu_utilization_ratio", "ocr_queue_depth"} <= mentioned
    assert mentioned - KNOWN == set()


def test_every_metric_the_operators_hpa_can_ask_for_is_served_by_a_shipped_adapter_rule():
    served = {rule["name"]["as"] for rule in adapter_rules()}
    assert {spec.DEFAULT_METRIC, spec.RATIO_GPU_METRIC, spec.QUEUE_METRIC} <= served


def test_the_operators_names_follow_the_conventions():
    for name in OPERATOR_NAMES:
        assert re.fullmatch(r"ocr_operator_[a-z0-9_]+", name), name
        assert not re.search(r"_(percent|milliseconds|ms)$", name), name
