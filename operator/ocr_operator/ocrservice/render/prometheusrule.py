"""monitoring.coreos.com/v1 PrometheusRule with this OcrService's own alerts (only when asked,
`spec.monitoring.prometheusRule.enabled`, and only where the PrometheusRule CRD exists).

Why per OcrService: the chart's PrometheusRule watches every OcrService of the cluster and needs
whoever installs the chart; a team that owns one namespace turns alerting on for its service
in the spec. Both are the same alerts: this renders the groups of the chart's rule file
(`prometheus-rules.yaml` beside this module, a byte-for-byte copy of
charts/causalflow-ocr/files/prometheus-rules.yaml checked by a unit test), with the same
thresholds, durations and runbooks, and every series selector narrowed to this OcrService:

  ocr_* (the server's /metrics)          namespace="NS", service="NAME"
  DCGM_FI_* (dcgm-exporter)              exported_namespace="NS", exported_pod=~"<pods of NAME>"
  prober_probe_total (the kubelet)       namespace="NS", pod=~"<pods of NAME>"
  kube_customresource_ocrservice_*       namespace="NS", ocrservice="NAME"
  kube_customresource_ocrbatch_*         namespace="NS", service="NAME" (the batches sending to it)
  kube_horizontalpodautoscaler_*         namespace="NS", horizontalpodautoscaler="NAME"

Groups about the operator itself (ocr_operator_*) are cluster-wide and left to the chart.
The rule file names no runbook address (only the installer knows where its copy of the docs'
runbooks page lives): with OCR_OPERATOR_RUNBOOK_BASE_URL set (the chart passes its
monitoring.prometheusRule.runbookBaseURL), each alert gets runbook_url <base>#<alert in lower
case>, the same link the chart's PrometheusRule carries; unset, none.
promtool checks the rendered rules and unit-tests that they fire for this OcrService and stay
silent for another one (tests/monitoring). Use either the chart's rules or these for a
service, not both: each would page once.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from importlib import resources
from typing import Any, Mapping

import yaml

from ocr_operator.spec import OcrServiceSpec

from .. import naming

API_VERSION = "monitoring.coreos.com/v1"
RULES_FILE = "prometheus-rules.yaml"
OPERATOR_GROUP_PREFIX = "causalflow-ocr.operator"
# The address of the docs' runbooks page where this installation hosts it ('' = no runbook links).
RUNBOOK_BASE_URL = os.environ.get("OCR_OPERATOR_RUNBOOK_BASE_URL", "").strip()
# A metric name where a selector starts: not a function call, not inside a string or a label list.
_SELECTOR = re.compile(r'(?<![\w"$.])(ocr_\w+|DCGM_FI_\w+|prober_probe_total|kube_\w+)\b(?!\s*\()(\{)?')


@lru_cache(maxsize=1)
def rule_groups() -> tuple[dict[str, Any], ...]:
    text = resources.files(__package__).joinpath(RULES_FILE).read_text()
    return tuple(yaml.safe_load(text)["groups"])


def _pods(name: str) -> str:
    """The pods of the OcrService's Deployment: <deployment>-<template hash>-<suffix>."""
    return re.escape(naming.deployment_name(name)) + "-[a-z0-9]+-[a-z0-9]+"


def matchers(metric: str, namespace: str, name: str) -> str:
    ns = f'namespace="{namespace}"'
    if metric.startswith("ocr_operator_"):
        raise ValueError(f"{metric} is the operator's, not an OcrService's")
    if metric.startswith("ocr_"):
        return f'{ns},service="{name}"'
    if metric.startswith("DCGM_FI_"):
        return f'exported_namespace="{namespace}",exported_pod=~"{_pods(name)}"'
    if metric == "prober_probe_total":
        return f'{ns},pod=~"{_pods(name)}"'
    if metric.startswith("kube_customresource_ocrservice_"):
        return f'{ns},ocrservice="{name}"'
    if metric.startswith("kube_customresource_ocrbatch_"):
        return f'{ns},service="{name}"'
    if metric.startswith("kube_horizontalpodautoscaler_"):
        return f'{ns},horizontalpodautoscaler="{naming.hpa_name(name)}"'
    raise ValueError(f"no OcrService scope known for {metric}")


def scope(expr: str, namespace: str, name: str) -> str:
    """`expr` with every series selector narrowed to OcrService `namespace/name`."""
    def one(m: re.Match) -> str:
        metric, brace = m.group(1), m.group(2)
        scoped = matchers(metric, namespace, name)
        return f"{metric}{{{scoped}," if brace else f"{metric}{{{scoped}}}"
    return _SELECTOR.sub(one, expr)


def with_runbook(rule: Mapping[str, Any], base_url: str) -> dict[str, Any]:
    """`rule` with runbook_url at its alert's section of the runbooks page at `base_url`
    (the page's anchor of `## AlertName`); a recording rule, or no base, unchanged."""
    if not base_url or "alert" not in rule:
        return dict(rule)
    annotations = {**rule.get("annotations", {}), "runbook_url": f"{base_url}#{rule['alert'].lower()}"}
    return {**rule, "annotations": annotations}


def render(owner: Mapping[str, Any], spec: OcrServiceSpec,
           runbook_base_url: str | None = None) -> dict[str, Any] | None:
    pr = spec.prometheus_rule
    if not pr.enabled:
        return None
    md = owner["metadata"]
    name, namespace = md["name"], md["namespace"]
    meta = naming.metadata(owner, naming.prometheusrule_name(name))
    # The operator's labels win: the watches select on them (spec validation refuses them too).
    meta["labels"] = {**dict(pr.labels), **meta["labels"]}
    base = RUNBOOK_BASE_URL if runbook_base_url is None else runbook_base_url
    groups = []
    for group in rule_groups():
        if group["name"].startswith(OPERATOR_GROUP_PREFIX):
            continue
        rules = [{**with_runbook(rule, base), "expr": scope(rule["expr"], namespace, name)} for rule in group["rules"]]
        groups.append({"name": f"{group['name']}.{namespace}.{name}", "rules": rules})
    return {"apiVersion": API_VERSION, "kind": "PrometheusRule", "metadata": meta, "spec": {"groups": groups}}
