"""The chart's alert rules: valid for promtool, unit-tested by promtool for every alert, pinned to
their thresholds (MUTATIONS below), each with its runbook in the docs, and shipped unchanged in the
PrometheusRule, linked to the runbooks only where the installer says where its copy of the docs is."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.docs.pages import anchors as docs_anchors
from tests.unit.chart.helm import by_kind, template
from tests.monitoring.common import CHART, RULE_TESTS, RULES, RUNBOOKS, alert_rules, binary

EXPECTED_ALERTS = {
    "OcrGPUMemoryHigh", "OcrLatencyP95High", "OcrErrorRateHigh", "OcrHealthChecksFailing",
    "OcrPageLoopRateHigh", "OcrPageTruncatedRateDoubled", "OcrPageEmptyRateHigh",
    "OcrServiceDegraded", "OcrServiceRolledBack", "OcrServiceQualityRegression", "OcrServiceRolloutStuck",
    "OcrServiceAtMaxReplicas",
    "OcrBatchWorkersWaiting", "OcrBatchStorageUnavailable", "OcrOperatorReconcileErrors",
}


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([binary("promtool"), *args], capture_output=True, text=True, timeout=120)


def test_promtool_check_rules():
    result = promtool("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout


def test_promtool_unit_tests_of_every_alert_pass():
    result = promtool("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_rule_file_has_exactly_the_expected_alerts():
    assert {rule["alert"] for rule in alert_rules()} == EXPECTED_ALERTS


def test_every_alert_has_a_firing_and_a_silent_case():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test.get("alert_rule_test", [])]
    for alert in EXPECTED_ALERTS:
        mine = [case for case in cases if case["alertname"] == alert]
        assert any(case["exp_alerts"] for case in mine), f"{alert}: no case where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{alert}: no case where it stays silent"


# A threshold or duration moved away from its value here must make promtool's unit tests fail:
# the tests pin the numbers, they do not merely run.
MUTATIONS = [
    ("OcrGPUMemoryHigh", "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.9", "DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE) > 0.92"),
    ("OcrGPUMemoryHigh", "> 0.9\n        for: 5m", "> 0.9\n        for: 2m"),
    ("OcrLatencyP95High", "[2m]))) > 5", "[2m]))) > 7"),
    ("OcrErrorRateHigh", "[2m])) > 0.01", "[2m])) > 0.03"),
    ("OcrErrorRateHigh", 'status=~"5.."', 'status=~"[45].."'),
    ("OcrHealthChecksFailing", 'result="failed"}[2m])) >= 10', 'result="failed"}[2m])) >= 8'),
    ("OcrHealthChecksFailing", 'probe_type="Readiness", result="failed"', 'result="failed"'),
    ("OcrPageLoopRateHigh", 'rate(ocr_page_outcomes_total{outcome="loop"}[10m]))\n            / sum by (namespace, service, revision) (rate(ocr_page_outcomes_total[10m])) > 0.05',
     'rate(ocr_page_outcomes_total{outcome="loop"}[10m]))\n            / sum by (namespace, service, revision) (rate(ocr_page_outcomes_total[10m])) > 0.12'),
    ("OcrPageEmptyRateHigh", 'rate(ocr_page_outcomes_total{outcome="empty"}[10m]))\n            / sum by (namespace, service, revision) (rate(ocr_page_outcomes_total[10m])) > 0.05',
     'rate(ocr_page_outcomes_total{outcome="empty"}[10m]))\n            / sum by (namespace, service, revision) (rate(ocr_page_outcomes_total[10m])) > 0.12'),
    ("OcrPageTruncatedRateDoubled", "2 * clamp_min(", "6 * clamp_min("),
    ("OcrPageTruncatedRateDoubled", "), 0.01)", "), 0.06)"),
    ("OcrServiceDegraded", 'reason!="RolledBack"', 'reason!="Nothing"'),
    ("OcrServiceRolloutStuck", "+ 600)", "+ 60)"),
    ("OcrServiceAtMaxReplicas", "for: 30m", "for: 10m"),
    ("OcrServiceAtMaxReplicas", "kube_customresource_ocrservice_status_condition),",
     "kube_horizontalpodautoscaler_spec_max_replicas),"),
    ("OcrBatchWorkersWaiting", 'WorkersUnschedulable"} == 0) > 0\n        for: 15m',
     'WorkersUnschedulable"} == 0) > 0\n        for: 10m'),
    ("OcrBatchWorkersWaiting", 'reason=~"WorkersNotCreated|WorkersUnschedulable"',
     'reason=~"WorkersNotCreated|WorkersUnschedulable|ServiceNotFound"'),
    ("OcrBatchStorageUnavailable", 'type="StorageAvailable"} == 0) > 0\n        for: 5m',
     'type="StorageAvailable"} == 0) > 0\n        for: 2m'),
    ("OcrOperatorReconcileErrors", "[5m])) > 0.1", "[5m])) > 0.4"),
    ("OcrOperatorReconcileErrors", "> 0.1\n        for: 15m", "> 0.1\n        for: 30m"),
]


@pytest.mark.parametrize("alert,old,new", MUTATIONS, ids=[new.split("\n")[-1] for _, _, new in MUTATIONS])
def test_a_moved_threshold_fails_the_promtool_tests(tmp_path, alert, old, new):
    rules = RULES.read_text()
    assert rules.count(old) == 1, f"mutation anchor {old!r} not found exactly once"
    (tmp_path / "rules.yaml").write_text(rules.replace(old, new))
    tests = yaml.safe_load(RULE_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    tests["tests"] = [t for t in tests["tests"] if t["name"].startswith(alert)]  # only its own cases: fast
    assert tests["tests"]
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    assert promtool("check", "rules", str(tmp_path / "rules.yaml")).returncode == 0
    result = promtool("test", "rules", str(tmp_path / "tests.yaml"))
    assert result.returncode != 0, f"promtool's tests still pass with {new!r}:\n{result.stdout}"


RUNBOOK_PAGE = "https://docs.example.com/ocr/operations/runbooks/"


def test_every_alert_says_what_and_how_bad_and_names_no_runbook_address():
    """The address of the runbooks is the installer's (where its copy of the docs lives): the rule
    file names none, the chart and the operator add it from runbookBaseURL."""
    for rule in alert_rules():
        for key in ("summary", "description"):
            assert rule["annotations"].get(key), f"{rule['alert']} lacks {key}"
        assert "runbook_url" not in rule["annotations"], rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_every_alert_has_a_section_of_the_runbooks_page_anchored_by_its_name_in_lower_case():
    anchors = docs_anchors(RUNBOOKS)
    for rule in alert_rules():
        assert rule["alert"].lower() in anchors, f"docs/operations/runbooks.md has no section '## {rule['alert']}'"


def _chart_rule(*extra: str) -> dict:
    [rule] = by_kind(template(extra=("-f", str(CHART / "ci" / "monitoring-values.yaml"), *extra)), "PrometheusRule")
    return rule


def test_the_chart_ships_the_rule_files_groups_unchanged_and_links_no_runbook_by_default():
    assert by_kind(template(), "PrometheusRule") == []
    rule = _chart_rule()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == {"groups": yaml.safe_load(RULES.read_text())["groups"]}
    assert "{{ $labels.namespace }}" in rule["spec"]["groups"][0]["rules"][1]["annotations"]["description"]
    assert "runbook_url" not in str(rule)


def test_a_runbook_base_url_links_every_alert_to_its_section_and_changes_nothing_else():
    rule = _chart_rule("--set", f"monitoring.prometheusRule.runbookBaseURL={RUNBOOK_PAGE}")
    groups = yaml.safe_load(RULES.read_text())["groups"]
    for group in groups:
        for r in group["rules"]:
            if "alert" in r:
                r["annotations"]["runbook_url"] = f"{RUNBOOK_PAGE}#{r['alert'].lower()}"
    assert rule["spec"] == {"groups": groups}
    urls = [r["annotations"]["runbook_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(urls) == len(EXPECTED_ALERTS)
    assert {url.partition("#")[2] for url in urls} <= docs_anchors(RUNBOOKS)


def test_the_operator_is_given_the_runbook_address_only_when_there_is_one():
    def operator_env(*extra: str) -> dict:
        [deployment] = by_kind(template(extra=extra), "Deployment")
        return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}

    assert "OCR_OPERATOR_RUNBOOK_BASE_URL" not in operator_env()
    env = operator_env("--set", f"monitoring.prometheusRule.runbookBaseURL={RUNBOOK_PAGE}")
    assert env["OCR_OPERATOR_RUNBOOK_BASE_URL"] == RUNBOOK_PAGE


def test_the_values_schema_guards_the_monitoring_block():
    from tests.unit.chart.helm import run_helm

    for wrong in ("ftp://wiki", "https://wiki/ocr.md#runbooks"):  # not a web page; an anchor of its own
        bad = run_helm("template", "ocr", str(CHART), "--set", f"monitoring.prometheusRule.runbookBaseURL={wrong}", check=False)
        assert bad.returncode != 0 and "runbookBaseURL" in bad.stderr, wrong
    typo = run_helm("template", "ocr", str(CHART), "--set", "monitoring.dashbaord.enabled=true", check=False)
    assert typo.returncode != 0 and "dashbaord" in typo.stderr
