"""A ServiceMonitor only when asked for and only when its CRD (prometheus-operator) exists."""

from __future__ import annotations

import json

import pytest

from tests.e2e.operator_fixtures import optional_child_service
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e


def test_a_service_monitor_appears_once_its_crd_exists_and_goes_when_disabled(private_cluster, tmp_path):
    cluster = private_cluster
    with optional_child_service(cluster, tmp_path, "ServiceMonitor", "serviceMonitor") as (ocr, _):
        namespace = ocr.ns
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
