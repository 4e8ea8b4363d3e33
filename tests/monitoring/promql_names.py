"""Metric names: which a PromQL expression uses, which the server exports, which other exporters do.

The chart's rules, dashboard and adapter rules, and the CRD, may use only
- the server's own families (``ocr_server.metrics.METRIC_NAMES``, histograms with their
  ``_bucket``/``_sum``/``_count`` series),
- the operator's own families (``ocr_operator.metrics.NAMES``, its histogram likewise),
- the external exporters' metrics listed in EXTERNAL below, each with where it is documented, and
- the kube-state-metrics custom-resource-state series that the chart's own configuration
  (files/kube-state-metrics-ocrservice.yaml) defines, computed from that file.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from ocr_operator.metrics import NAMES as OPERATOR_METRIC_NAMES
from ocr_server.runtime.metrics import CPU_METRIC_NAMES, GPU_METRIC_NAMES
from tests.monitoring.common import KSM_CONFIG

DCGM = ("NVIDIA dcgm-exporter, etc/default-counters.csv "
        "(https://github.com/NVIDIA/dcgm-exporter/blob/main/etc/default-counters.csv); FB in MiB")
KUBELET = ("kubelet /metrics/probes, k8s.io/kubernetes pkg/kubelet/prober/prober_manager.go "
           "(Subsystem prober, Name probe_total; labels probe_type, result, container, pod, namespace, pod_uid)")
KSM_HPA = ("kube-state-metrics docs/metrics/workload/horizontalpodautoscaler-metrics.md "
           "(labels horizontalpodautoscaler, namespace)")

EXTERNAL = {
    "DCGM_FI_DEV_GPU_UTIL": DCGM,
    "DCGM_FI_DEV_FB_USED": DCGM,
    "DCGM_FI_DEV_FB_FREE": DCGM,
    "prober_probe_total": KUBELET,
    "kube_horizontalpodautoscaler_status_current_replicas": KSM_HPA,
    "kube_horizontalpodautoscaler_status_desired_replicas": KSM_HPA,
    "kube_horizontalpodautoscaler_spec_max_replicas": KSM_HPA,
}

HISTOGRAMS = {"ocr_request_latency_seconds", "ocr_batch_size", "ocr_visual_tokens", "ocr_generated_tokens", "ocr_split_parts",
              "ocr_queue_wait_seconds", "ocr_prefill_pages",
              "ocr_operator_reconcile_duration_seconds"}


def series_names(families: tuple[str, ...]) -> set[str]:
    out = set(families)
    for name in families:
        if name in HISTOGRAMS:
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return out


SERVER_CPU = series_names(CPU_METRIC_NAMES)
SERVER_GPU = series_names(GPU_METRIC_NAMES)
OPERATOR = series_names(OPERATOR_METRIC_NAMES)


def ksm_ocrservice_names(path: Path = KSM_CONFIG) -> set[str]:
    """Series names kube-state-metrics builds from the shipped config: <metricNamePrefix>_<name>."""
    doc = yaml.safe_load(path.read_text())
    resources = doc["kube-state-metrics"]["customResourceState"]["config"]["spec"]["resources"]
    names = set()
    for resource in resources:
        prefix = resource.get("metricNamePrefix", "kube_customresource")
        names |= {f"{prefix}_{metric['name']}" for metric in resource["metrics"]}
    return names


KNOWN = SERVER_CPU | SERVER_GPU | OPERATOR | set(EXTERNAL) | ksm_ocrservice_names()

_KEYWORDS = {
    "sum", "avg", "max", "min", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
    "unless", "bool", "offset", "inf", "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (not functions, keywords, label names or values)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)                 # string literals
    s = re.sub(r"\{[^}]*\}", "", s)                               # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)                              # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)
    s = re.sub(r"\b[a-zA-Z_][a-zA-Z0-9_]*\s*\(", "(", s)          # function calls
    tokens = re.findall(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", s)
    return {t for t in tokens if t.lower() not in _KEYWORDS and not re.fullmatch(r"[eE]\d*", t)}
