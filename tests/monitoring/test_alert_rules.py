"""The chart's alert rules: valid for promtool, unit-tested by promtool for every alert, pinned to
their thresholds (MUTATIONS below), linked to their runbook in the docs, and shipped unchanged in the
PrometheusRule."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from tests.unit.chart.helm import by_kind, template
from tests.monitoring.common import CHART, RULE_TESTS, RULES, RUNBOOKS, alert_rules, binary

EXPECTED_ALERTS = {
    "OcrGPUMemoryHigh", "OcrLatencyP95High", "OcrErrorRateHigh", "OcrHealthChecksFailing",
    "OcrServiceDegraded", "OcrServiceRolledBack", "OcrServiceQualityRegression", "OcrServiceRolloutStuck",
    "OcrServiceAtMaxReplicas",
    "OcrOperatorReconcileErrors",
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
    ("OcrServiceDegraded", 'reason!="RolledBack"', 'reason!="Nothing"'),
    ("OcrServiceRolloutStuck", "+ 600)", "+ 60)"),
    ("OcrServiceAtMaxReplicas", "for: 30m", "for: 10m"),
    ("OcrServiceAtMaxReplicas", "kube_customresource_ocrservice_status_condition),",
     "kube_horizontalpodautoscaler_spec_max_replicas),"),
    ("OcrOperatorReconcileErrors", "[5m])) > 0.1", "[5m])) > 0.4"),
    ("OcrOperatorReconcileErrors", "for: 15m", "for: 30m"),
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


def github_anchor(heading: str) -> str:
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return slug.replace(" ", "-")


def test_every_runbook_url_points_at_the_alerts_runbook_section_in_the_docs():
    anchors = {github_anchor(line.lstrip("#")) for line in RUNBOOKS.read_text().splitlines() if line.startswith("#")}
    for rule in alert_rules():
        url = rule["annotations"]["runbook_url"]
        base, _, anchor = url.partition("#")
        assert base == "https://github.com/causalflow/causalflow-ocr/blob/main/docs/operations/runbooks.md", url
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"docs/operations/runbooks.md has no heading '{rule['alert']}'"
        for key in ("summary", "description"):
            assert rule["annotations"].get(key), f"{rule['alert']} lacks {key}"
        assert rule["labels"]["severity"] in {"warning", "critical"}


def test_the_chart_ships_the_same_rules_as_a_prometheusrule():
    assert by_kind(template(), "PrometheusRule") == []
    rendered = template(extra=("-f", str(CHART / "ci" / "monitoring-values.yaml"),
                               "--set", "monitoring.prometheusRule.runbookBaseURL=https://wiki.example/ocr.md"))
    [rule] = by_kind(rendered, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    expected = yaml.safe_load(RULES.read_text().replace(
        "https://github.com/causalflow/causalflow-ocr/blob/main/docs/operations/runbooks.md", "https://wiki.example/ocr.md"))
    assert rule["spec"] == {"groups": expected["groups"]}
    assert "{{ $labels.namespace }}" in rule["spec"]["groups"][0]["rules"][1]["annotations"]["description"]


def test_the_values_schema_guards_the_monitoring_block():
    from tests.unit.chart.helm import run_helm

    bad = run_helm("template", "ocr", str(CHART), "--set", "monitoring.prometheusRule.runbookBaseURL=ftp://wiki", check=False)
    assert bad.returncode != 0 and "runbookBaseURL" in bad.stderr
    typo = run_helm("template", "ocr", str(CHART), "--set", "monitoring.dashbaord.enabled=true", check=False)
    assert typo.returncode != 0 and "dashbaord" in typo.stderr
