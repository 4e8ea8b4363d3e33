"""A ServiceMonitor only when asked for and only when its CRD (prometheus-operator) exists."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.e2e.operator_fixtures import install_crd, ocrservice, optional_child_service, prometheus_operator_crd
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


def test_the_operator_goes_on_reconciling_when_the_service_monitor_crd_is_deleted_under_it(private_cluster, tmp_path):
    """Uninstalling prometheus-operator while ours runs: the ServiceMonitor watch loses its API. The
    operator drops the kind and goes on (no ServiceMonitor rendered, OcrServices reconciled), and
    renders it again once the CRD is back."""
    cluster = private_cluster
    crd = prometheus_operator_crd("ServiceMonitor")
    with optional_child_service(cluster, tmp_path, "ServiceMonitor", "serviceMonitor") as (ocr, op):
        wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web"), timeout=30,
                 message="ServiceMonitor created")
        cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", "--timeout=60s")
        ocr.apply(ocrservice("after", replicas=1, monitoring={"serviceMonitor": {"enabled": True}}))
        after = ocr.wait_ready("after", timeout=60)
        assert ocr.condition(after, "Degraded")["status"] == "False"
        ocr.patch("ocrs", "web", {"spec": {"replicas": 2}})
        wait_for(lambda: (ocr.get("deployments", "web") or {}).get("spec", {}).get("replicas") == 2, timeout=30,
                 message="web scaled to 2 with the ServiceMonitor CRD gone")
        install_crd(cluster, crd)
        for name in ("web", "after"):
            wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", name), timeout=30,
                     message=f"ServiceMonitor {name} rendered again once its CRD is back")
        assert op.alive(), "the operator exited"


def test_service_monitors_come_back_after_a_reinstall_of_their_crd_between_two_discovery_looks(private_cluster, tmp_path):
    """The API server deletes a CRD's objects with it; when the CRD is back before discovery looks
    again, the CRD's watch events tell the operator that what it cached of the kind is gone."""
    cluster = private_cluster
    crd = prometheus_operator_crd("ServiceMonitor")
    with optional_child_service(cluster, tmp_path, "ServiceMonitor", "serviceMonitor") as (ocr, op):
        for attempt in range(3):
            wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web"), timeout=30,
                     message=f"ServiceMonitor rendered (reinstall {attempt})")
            cluster.kubectl("delete", "crd", crd["metadata"]["name"], "--wait=true", "--timeout=60s")
            install_crd(cluster, crd)
        wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web"), timeout=30,
                 message="ServiceMonitor rendered after the last reinstall")
        assert op.alive(), "the operator exited"


def test_the_operator_survives_the_service_monitor_crd_deleted_while_it_was_paused(private_cluster, tmp_path):
    """Paused (a throttled or swapped-out process) while the CRD goes, kopf learns of the deletion
    and loses its ServiceMonitor watch at the same moment: its re-watch is answered 404 before its
    own rescan drops the kind. That used to stop kopf, and the operator with it (exit 1)."""
    cluster = private_cluster
    crd = prometheus_operator_crd("ServiceMonitor")
    name = crd["metadata"]["name"]
    with optional_child_service(cluster, tmp_path, "ServiceMonitor", "serviceMonitor") as (ocr, op):
        wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", "web"), timeout=30,
                 message="ServiceMonitor created")
        # A watch of our own, ended by the API server when it closes the kind's watches (a second
        # after the CRD is gone): then the operator's watch has ended too.
        ours = subprocess.Popen([str(cluster.bin_dir / "kubectl"), "get", "servicemonitors.monitoring.coreos.com",
                                 "-A", "--watch", "-o", "name"], env=cluster.env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        os.kill(op.pid, signal.SIGSTOP)
        try:
            cluster.kubectl("delete", "crd", name, "--wait=true", "--timeout=60s")
            ours.wait(timeout=60)
            wait_for(lambda: cluster.kubectl("get", "--raw", "/apis/monitoring.coreos.com/v1", check=False).returncode != 0,
                     timeout=30, message="discovery no longer lists monitoring.coreos.com/v1")
        finally:
            os.kill(op.pid, signal.SIGCONT)
            if ours.poll() is None:
                ours.kill()
                ours.wait()
        # kopf's stop comes a moment after the deletion's news: each wait also ends on an exit.
        wait_for(lambda: not op.alive() or "forgetting their cached objects" in op.log_text(), timeout=30,
                 message="the operator told of the CRD's deletion")
        ocr.apply(ocrservice("after", replicas=1, monitoring={"serviceMonitor": {"enabled": True}}))
        wait_for(lambda: not op.alive() or ocr.ready("after"), timeout=60, message="OcrService after Ready")
        assert op.alive(), f"the operator exited:\n{op.log_tail()}"
        install_crd(cluster, crd)
        for obj in ("web", "after"):
            wait_for(lambda: ocr.get("servicemonitors.monitoring.coreos.com", obj), timeout=30,
                     message=f"ServiceMonitor {obj} rendered again once its CRD is back")
        assert op.alive(), f"the operator exited:\n{op.log_tail()}"
        assert op.starts == 1 and "has failed" not in op.log_text(), op.log_tail()
