"""The Grafana dashboard's structure, the chart's ConfigMap of it, and one metric naming scheme:
every name the rules and the dashboard use is exported by the server or a documented exporter."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ocr_operator.ocrservice.rollout import RolloutStatus
from ocr_server.runtime.metrics import CPU_METRIC_NAMES, GPU_METRIC_NAMES, Metrics
from tests.unit.chart.helm import by_kind, template
from tests.monitoring.common import CHART, DASHBOARD, KSM_CONFIG, alert_rules
from tests.monitoring.promql_names import (EXTERNAL, KNOWN, OPERATOR, SERVER_CPU, ksm_ocrservice_names,
                                                metric_names)

REQUIRED_PANELS = [  # what the dashboard must show, by title words: traffic, model, GPU, batching, rollouts
    "requests per second", "latency: average and p95", "error rate", "generated tokens", "visual tokens",
    "gpu utilisation", "gpu memory and its peak", "queue depth", "batch size", "cache hit ratio",
    "replicas vs desired", "rollouts and rollbacks", "page outcomes per revision",
]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def targets(d: dict) -> list[tuple[dict, dict]]:
    return [(p, t) for p in d["panels"] for t in p["targets"]]


def test_panel_ids_are_unique_and_every_required_panel_is_there():
    d = dashboard()
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    titles = " | ".join(p["title"].lower() for p in d["panels"])
    assert [want for want in REQUIRED_PANELS if want not in titles] == []
    assert d["uid"] and len(d["uid"]) <= 40 and d["schemaVersion"] >= 36


def test_every_panel_and_query_uses_the_datasource_variable():
    d = dashboard()
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "service"):
        assert variables[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert re.match(r"label_values\((\w+)", variables[name]["query"]["query"]).group(1) in SERVER_CPU
    for panel, target in targets(d):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    # no data source pinned by uid anywhere in the file
    assert set(re.findall(r'"uid": "([^"]*)"', DASHBOARD.read_text())) == {"${datasource}", d["uid"]}


def test_every_panel_has_a_unit_layout_and_queries():
    units = {"reqps", "s", "percentunit", "percent", "bytes", "short"}
    d = dashboard()
    for panel in d["panels"]:
        assert panel["fieldConfig"]["defaults"]["unit"] in units, panel["title"]
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    # the GPU memory panel is in bytes: dcgm-exporter's MiB are converted
    [memory] = [p for p in d["panels"] if p["title"] == "GPU memory and its peak"]
    assert all("1048576" in t["expr"] for t in memory["targets"] if "DCGM_FI_DEV_FB" in t["expr"])


def operator_panel(panel: dict) -> bool:
    """The operator's own panels: operator-wide (its series carry the operator's labels, not an OcrService's)."""
    return panel["title"].startswith("Operator:")


def test_every_queried_panel_filters_on_the_namespace_and_service_variables():
    for panel, target in targets(dashboard()):
        if operator_panel(panel):
            assert metric_names(target["expr"]) <= OPERATOR, panel["title"]
            continue
        assert '=~"$namespace"' in target["expr"], panel["title"]
        assert "$service" in target["expr"], panel["title"]


def test_every_metric_name_in_rules_and_dashboard_is_really_exported():
    used = {name for rule in alert_rules() for name in metric_names(rule["expr"])}
    used |= {name for _, target in targets(dashboard()) for name in metric_names(target["expr"])}
    assert used and used - KNOWN == set()
    # and the lists themselves are used, not padding
    assert set(EXTERNAL) <= used
    assert {"ocr_requests_total", "ocr_request_latency_seconds_bucket", "ocr_queue_depth"} <= used


def test_the_server_exports_exactly_its_declared_names_without_and_with_a_gpu():
    def families(metrics: Metrics) -> set[str]:
        text = metrics.render().decode()
        return {re.match(r"# TYPE (\S+)", line).group(1) for line in text.splitlines() if line.startswith("# TYPE")} \
            - {f.name + "_created" for f in text_string_to_metric_families(text)}

    cpu = Metrics()
    got = {n for n in families(cpu) if not n.endswith("_created")}
    assert got == set(CPU_METRIC_NAMES), got ^ set(CPU_METRIC_NAMES)
    assert not any("percent" in n for n in got)
    gpu = Metrics()
    gpu.enable_gpu(0)  # torch's families always; NVML's only where NVML answers (a GPU machine)
    got_gpu = {n for n in families(gpu) if not n.endswith("_created")} - set(CPU_METRIC_NAMES)
    assert {"ocr_torch_cuda_allocated_bytes", "ocr_torch_cuda_max_allocated_bytes"} <= got_gpu <= set(GPU_METRIC_NAMES)


def test_conventional_names():
    for name in CPU_METRIC_NAMES + GPU_METRIC_NAMES:
        assert re.fullmatch(r"ocr_[a-z0-9_]+", name), name
        assert not re.search(r"_(percent|milliseconds|ms|mb|megabytes|kb)$", name), name
    counters = {n for n in CPU_METRIC_NAMES if n.endswith("_total")}
    metrics = Metrics().render().decode()
    for line in metrics.splitlines():
        if line.startswith("# TYPE") and line.endswith(" counter"):
            assert line.split()[2] in counters, line


def test_kube_state_metrics_config_defines_what_the_rules_read():
    names = ksm_ocrservice_names(KSM_CONFIG)
    assert "kube_customresource_ocrservice_status_condition" in names
    assert "kube_customresource_ocrservice_rollout_phase" in names
    # paths point at fields the CRD really has
    import yaml

    crd = yaml.safe_load((CHART / "files" / "ocr.causalflow.dev_ocrservices.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    config = yaml.safe_load(KSM_CONFIG.read_text())["kube-state-metrics"]["customResourceState"]["config"]
    for metric in config["spec"]["resources"][0]["metrics"]:
        each = metric["each"]
        path = (each.get("gauge") or each.get("stateSet"))["path"]
        node = schema
        for part in path:
            if node.get("x-kubernetes-preserve-unknown-fields") and part not in node.get("properties", {}):
                # status.rollout is free-form in the CRD: its keys are the operator's record
                assert part in {key for _, key in RolloutStatus._KEYS}, (metric["name"], part)
                break
            node = node["properties"][part]
            if node.get("type") == "array":
                node = node["items"]
    assert config["spec"]["resources"][0]["groupVersionKind"] == {
        "group": crd["spec"]["group"], "version": crd["spec"]["versions"][0]["name"], "kind": crd["spec"]["names"]["kind"]}



def test_each_state_set_lists_every_phase_the_api_has():
    """A phase missing from a StateSet's list is never 1: a batch Suspended would match no series."""
    import yaml

    from ocr_operator.api.ocrbatch import PHASES as BATCH_PHASES
    from ocr_operator.ocrservice.rollout.model import PHASES as ROLLOUT_PHASES

    config = yaml.safe_load(KSM_CONFIG.read_text())["kube-state-metrics"]["customResourceState"]["config"]
    lists = {(r["groupVersionKind"]["kind"], m["name"]): m["each"]["stateSet"]["list"]
             for r in config["spec"]["resources"] for m in r["metrics"] if "stateSet" in m["each"]}
    assert lists == {("OcrService", "rollout_phase"): list(ROLLOUT_PHASES), ("OcrBatch", "phase"): list(BATCH_PHASES)}

def test_the_chart_ships_the_dashboard_in_a_sidecar_configmap():
    assert by_kind(template(), "ConfigMap") == []
    [cm] = by_kind(template(extra=("-f", str(CHART / "ci" / "monitoring-values.yaml"))), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "OCR"}
    assert json.loads(cm["data"]["causalflow-ocr.json"]) == dashboard()
    [moved] = by_kind(template({"monitoring.dashboard.enabled": "true", "monitoring.dashboard.namespace": "monitoring"}), "ConfigMap")
    assert moved["metadata"]["namespace"] == "monitoring"


def test_the_kubelet_source_defines_prober_probe_total():
    """The kubelet this repository builds (k8s.io/kubernetes at localcluster/versions.env's
    K8S_VERSION, fetched through the Go module proxy like the cluster binaries; cached after the
    first time) defines the metric the health-check alert reads, with the labels and values it
    matches on."""
    import subprocess

    from localcluster.versions import K8S_VERSION

    result = subprocess.run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
                            capture_output=True, text=True, timeout=600, cwd="/")
    assert result.returncode == 0, result.stdout + result.stderr
    text = (Path(json.loads(result.stdout)["Dir"]) / "pkg" / "kubelet" / "prober" / "prober_manager.go").read_text()
    assert 'Subsystem:      "prober"' in text and 'Name:           "probe_total"' in text
    for label in ('"probe_type"', '"result"', '"container"', '"pod"', '"namespace"'):
        assert label in text
    assert 'probeResultFailed     string = "failed"' in text and 'probeResultSuccessful string = "successful"' in text
    assert 'return "Readiness"' in text
