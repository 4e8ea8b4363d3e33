"""spec.monitoring.prometheusRule: a PrometheusRule child only when asked for and only when its CRD
(prometheus-operator) exists, with the OcrService's own alerts; gone when disabled.

Node: kwok pods (the rule does not depend on them); the operator runs as a local process.
"""

from __future__ import annotations

import pytest

from tests.e2e.operator_fixtures import (OperatorProcess, _operator_kubeconfig, install_crd, ocrservice,
                                        prometheus_operator_crd)
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

PR_CRD = prometheus_operator_crd("PrometheusRule")
RESOURCE = "prometheusrules.monitoring.coreos.com"


def test_a_prometheus_rule_appears_once_its_crd_exists_scoped_to_the_ocrservice_and_goes_when_disabled(
        cluster, ocr, ocr_crd, namespace, tmp_path, request):
    had_crd = cluster.kubectl("get", "crd", RESOURCE, check=False).returncode == 0
    failed = request.session.testsfailed
    op = OperatorProcess(_operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log",
                         extra_env={"OCR_OPERATOR_DISCOVERY_SECONDS": "1"}).start()
    try:
        ocr.apply(ocrservice("web", replicas=1, monitoring={"prometheusRule": {"enabled": True,
                                                                                "labels": {"release": "prom"}}}))
        obj = ocr.wait_ready("web")
        if not had_crd:  # without the CRD the toggle is a no-op, not an error
            assert ocr.condition(obj, "Degraded")["status"] == "False"
            install_crd(cluster, PR_CRD)
        rule = wait_for(lambda: ocr.get(RESOURCE, "web"), timeout=30, message="PrometheusRule created")
        assert rule["metadata"]["labels"]["release"] == "prom"
        assert rule["metadata"]["ownerReferences"][0]["name"] == "web"
        exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
        assert exprs and all(f'namespace="{namespace}"' in e for e in exprs), exprs
        assert any('service="web"' in e for e in exprs) and any('ocrservice="web"' in e for e in exprs)
        ocr.patch("ocrs", "web", {"spec": {"monitoring": {"prometheusRule": {"enabled": False}}}})
        wait_for(lambda: ocr.get(RESOURCE, "web") is None, timeout=15, message="PrometheusRule deleted")
    finally:
        op.stop()
        if not had_crd:
            cluster.kubectl("delete", "crd", RESOURCE, "--wait=false", check=False)
        if request.session.testsfailed > failed:
            print(op.log_tail(120))
