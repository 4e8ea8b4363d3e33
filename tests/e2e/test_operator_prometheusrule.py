"""spec.monitoring.prometheusRule: a PrometheusRule child only when asked for and only when its CRD
(prometheus-operator) exists, with the OcrService's own alerts; gone when disabled.

Node: kwok pods (the rule does not depend on them); the operator runs as a local process.
"""

from __future__ import annotations

import pytest

from tests.e2e.operator_fixtures import optional_child_service
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

RESOURCE = "prometheusrules.monitoring.coreos.com"


def test_a_prometheus_rule_appears_once_its_crd_exists_scoped_to_the_ocrservice_and_goes_when_disabled(
        private_cluster, tmp_path):
    with optional_child_service(private_cluster, tmp_path, "PrometheusRule", "prometheusRule") as (ocr, _):
        namespace = ocr.ns
        rule = wait_for(lambda: ocr.get(RESOURCE, "web"), timeout=30, message="PrometheusRule created")
        assert rule["metadata"]["labels"]["release"] == "prom"
        assert rule["metadata"]["ownerReferences"][0]["name"] == "web"
        exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
        assert exprs and all(f'namespace="{namespace}"' in e for e in exprs), exprs
        assert any('service="web"' in e for e in exprs) and any('ocrservice="web"' in e for e in exprs)
        ocr.patch("ocrs", "web", {"spec": {"monitoring": {"prometheusRule": {"enabled": False}}}})
        wait_for(lambda: ocr.get(RESOURCE, "web") is None, timeout=15, message="PrometheusRule deleted")
