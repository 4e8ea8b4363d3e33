"""A ServiceMonitor only when asked for and only when its CRD (prometheus-operator) exists."""

from __future__ import annotations

import json

import pytest

from tests.e2e.operator_fixtures import (OperatorProcess, _operator_kubeconfig, install_crd, ocrservice,
                                        prometheus_operator_crd)
from tests.e2e.waiting import wait_for

pytestmark = pytest.mark.e2e

SM_CRD = prometheus_operator_crd("ServiceMonitor")


def test_a_service_monitor_appears_once_its_crd_exists_and_goes_when_disabled(cluster, ocr, ocr_crd, namespace,
                                                                                tmp_path, request):
    had_crd = cluster.kubectl("get", "crd", "servicemonitors.monitoring.coreos.com", check=False).returncode == 0
    failed = request.session.testsfailed
    op = OperatorProcess(_operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log",
                         extra_env={"OCR_OPERATOR_DISCOVERY_SECONDS": "1"}).start()  # resync stays 300 s
    try:
        ocr.apply(ocrservice("web", replicas=1, monitoring={"serviceMonitor": {"enabled": True,
                                                                                "labels": {"release": "prom"}}}))
        obj = ocr.wait_ready("web")
        if not had_crd:  # without the CRD the toggle is a no-op, not an error
            assert ocr.condition(obj, "Degraded")["status"] == "False"
            install_crd(cluster, SM_CRD)
        sm = wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web"), timeout=30,
                      message="ServiceMonitor created")
        assert sm["metadata"]["labels"]["release"] == "prom"
        assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
        assert sm["metadata"]["ownerReferences"][0]["name"] == "web"
        # Changed by another field manager: the ServiceMonitor watch wakes the repair (no resync).
        cluster.kubectl("patch", "servicemonitors.monitoring.coreos.com", "web", "-n", namespace, "--type", "merge",
                        "--field-manager", "someone-else", "-p", json.dumps({"spec": {"endpoints": [
                            {"port": "http", "path": "/elsewhere", "interval": "5m"}]}}))
        wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web")["spec"]["endpoints"]
                 == [{"port": "http", "path": "/metrics", "interval": "30s"}], timeout=15,
                 message="ServiceMonitor repaired")
        ocr.patch("ocrs", "web", {"spec": {"monitoring": {"serviceMonitor": {"enabled": False}}}})
        wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web") is None, timeout=15,
                 message="ServiceMonitor deleted")
    finally:
        op.stop()
        if not had_crd:
            cluster.kubectl("delete", "crd", "servicemonitors.monitoring.coreos.com", "--wait=false", check=False)
        if request.session.testsfailed > failed:
            print(op.log_tail(120))
