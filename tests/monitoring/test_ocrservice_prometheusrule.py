"""spec.monitoring.prometheusRule: the operator renders the chart's alerts for one OcrService, every
selector narrowed to it (its batches' alerts to the batches sending to it). promtool checks the
rendered rules and shows they fire for this OcrService and stay silent for another one with the
same values."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from ocr_operator.ocrservice.render import prometheusrule, render_all
from tests.monitoring.common import RULES, alert_rules, binary
from tests.unit.operator.helpers import owner, parsed

OPERATOR_COPY = Path(prometheusrule.__file__).with_name(prometheusrule.RULES_FILE)


def rendered(spec: dict | None = None, available: frozenset[str] | None = None, name: str = "web") -> dict | None:
    body = owner({"monitoring": {"prometheusRule": {"enabled": True, "labels": {"release": "kps"}}}, **(spec or {})},
                 name=name, namespace="ns1")
    return render_all(body, parsed(body), available=available).objects["PrometheusRule"]


def write_rules(tmp_path: Path, rule: dict) -> Path:
    path = tmp_path / "ocrservice-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def test_the_operators_copy_of_the_rule_file_is_the_charts_byte_for_byte():
    assert OPERATOR_COPY.read_bytes() == RULES.read_bytes(), (
        f"cp {RULES.relative_to(RULES.parents[3])} {OPERATOR_COPY.relative_to(RULES.parents[3])}")


def test_it_is_off_by_default_and_absent_where_the_prometheusrule_crd_is_not_served():
    body = owner()
    assert render_all(body, parsed(body)).objects["PrometheusRule"] is None
    assert rendered(available=frozenset({"ServiceMonitor"})) is None
    assert rendered(available=frozenset({"PrometheusRule"})) is not None


def test_it_carries_every_chart_alert_with_the_same_thresholds_scoped_to_the_ocrservice():
    rule = rendered()
    assert rule["metadata"]["name"] == "web" and rule["metadata"]["labels"]["release"] == "kps"
    assert rule["metadata"]["ownerReferences"][0]["kind"] == "OcrService"
    ours = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    chart = {r["alert"]: r for r in alert_rules() if not r["alert"].startswith("OcrOperator")}
    assert [r["alert"] for r in ours] == list(chart)
    for r in ours:
        assert {k: v for k, v in r.items() if k != "expr"} == {k: v for k, v in chart[r["alert"]].items() if k != "expr"}
        assert 'namespace="ns1"' in r["expr"], r["alert"]


def test_it_links_no_runbook_unless_given_the_address_and_then_the_same_link_as_the_chart():
    assert "runbook_url" not in str(rendered())
    body = owner({"monitoring": {"prometheusRule": {"enabled": True}}}, name="web", namespace="ns1")
    page = "https://docs.example.com/ocr/operations/runbooks/"
    rule = prometheusrule.render(body, parsed(body), runbook_base_url=page)
    ours = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert ours and all(r["annotations"]["runbook_url"] == f"{page}#{r['alert'].lower()}" for r in ours)
    plain = [r for g in rendered()["spec"]["groups"] for r in g["rules"]]
    assert [{k: v for k, v in r["annotations"].items() if k != "runbook_url"} for r in ours] == [
        r["annotations"] for r in plain]


def test_the_operator_reads_the_runbook_address_from_the_variable_the_chart_sets():
    from tests.unit.chart.helm import by_kind, template

    page = "https://docs.example.com/ocr/operations/runbooks/"
    [deployment] = by_kind(template(extra=("--set", f"monitoring.prometheusRule.runbookBaseURL={page}")), "Deployment")
    env = {e["name"]: e["value"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    code = "from ocr_operator.ocrservice.render import prometheusrule as p; print(p.RUNBOOK_BASE_URL)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == page


def test_promtool_accepts_the_rendered_rules(tmp_path):
    out = subprocess.run([binary("promtool"), "check", "rules", str(write_rules(tmp_path, rendered()))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_rendered_alerts_fire_for_their_ocrservice_and_stay_silent_for_another(tmp_path):
    rules = write_rules(tmp_path, rendered())
    series = []
    for svc in ("web", "other"):  # the same failure in both: 5 % of requests answer 500, rolled back
        series += [
            {"series": f'ocr_requests_total{{namespace="ns1",service="{svc}",pod="{svc}-abc12-xyz34",endpoint="/v1/ocr",status="500"}}',
             "values": "0+5x20"},
            {"series": f'ocr_requests_total{{namespace="ns1",service="{svc}",pod="{svc}-abc12-xyz34",endpoint="/v1/ocr",status="200"}}',
             "values": "0+95x20"},
            {"series": f'kube_customresource_ocrservice_status_condition{{namespace="ns1",ocrservice="{svc}",type="Degraded",reason="RolledBack"}}',
             "values": "1x20"},
            # a batch sending to it whose workers the quota refuses (its series name the OcrService as `service`)
            {"series": f'kube_customresource_ocrbatch_status_condition{{namespace="ns1",ocrbatch="{svc}-archive",service="{svc}",'
                       f'type="Ready",reason="WorkersNotCreated"}}', "values": "0x20"},
        ]
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "OcrErrorRateHigh", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "namespace": "ns1", "service": "web"},
                "exp_annotations": {k: v for k, v in chart_annotations("OcrErrorRateHigh", namespace="ns1", service="web",
                                                                        value="5%").items()}}]},
            {"eval_time": "10m", "alertname": "OcrServiceRolledBack", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "ns1", "ocrservice": "web"},
                "exp_annotations": chart_annotations("OcrServiceRolledBack", namespace="ns1", ocrservice="web")}]},
            {"eval_time": "20m", "alertname": "OcrBatchWorkersWaiting", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "ns1", "ocrbatch": "web-archive", "service": "web",
                               "reason": "WorkersNotCreated"},
                "exp_annotations": chart_annotations("OcrBatchWorkersWaiting", namespace="ns1", ocrbatch="web-archive",
                                                     service="web", reason="WorkersNotCreated")}]},
        ]}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    out = subprocess.run([binary("promtool"), "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def chart_annotations(alert: str, **labels: str) -> dict:
    """The chart rule's annotations with its {{ $labels.x }} / {{ $value ... }} filled in."""
    import re

    [rule] = [r for r in alert_rules() if r["alert"] == alert]
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        text = re.sub(r"\{\{ \$value[^}]*\}\}", labels.get("value", ""), text)
        out[key] = text
    return out
