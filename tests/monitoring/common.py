"""Shared paths and helpers of the monitoring tests: the chart's rule file and dashboard, promtool."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "causalflow-ocr"
RULES = CHART / "files" / "prometheus-rules.yaml"
RULE_TESTS = Path(__file__).with_name("alert-rules.test.yaml")
DASHBOARD = CHART / "files" / "grafana-dashboard.json"
KSM_CONFIG = CHART / "files" / "kube-state-metrics-ocrservice.yaml"
RUNBOOKS = ROOT / "docs" / "operations" / "runbooks.md"
ENSURE = Path(__file__).with_name("ensure-prometheus.sh")


def binary(name: str) -> str:
    """promtool or prometheus (Debian's `prometheus` package), installed by ensure-prometheus.sh."""
    found = shutil.which(name)
    if not found:
        subprocess.run(["bash", str(ENSURE)], check=True, timeout=600)
        found = shutil.which(name)
    assert found, f"{name} not found after {ENSURE.name}: install Debian's prometheus package"
    return found


def alert_rules(text: str | None = None) -> list[dict]:
    doc = yaml.safe_load(text if text is not None else RULES.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"] if "alert" in rule]
