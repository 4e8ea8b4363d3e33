"""The local cluster's metric chain (localcluster/metrics_chain.py) keeps its promises: Prometheus
never scrapes kwok's fake pod addresses, and the operator's own metrics arrive through it (the
dashboard's operator panels return them).

Node: the pods here are kwok's (fake 10.0.x.x addresses that must never be contacted); the
operator runs as a local process on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import json
import time

import pytest
import yaml

from localcluster.metrics_chain import targets
from tests.monitoring.common import DASHBOARD
from localcluster.nodeconfig import KWOK_CIDR, POD_CIDR
from tests.e2e.conftest import require_local
from tests.e2e.operator_fixtures import ocrservice
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e


def host(address: str) -> ipaddress.IPv4Address:
    return ipaddress.ip_address(address.rsplit(":", 1)[0])


def test_prometheus_drops_a_kwok_pod_that_looks_like_a_server_and_scrapes_only_real_node_pods_and_loopback(
        cluster, namespace):
    require_local(cluster)
    # Labelled and ported exactly like an OcrService's server pod, but on a kwok node.
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "lookalike", "labels": {"app.kubernetes.io/name": "causalflow-ocr",
                                                     "app.kubernetes.io/instance": "lookalike"}},
        "spec": {"containers": [{"name": "server", "image": "registry.invalid/ocr-server:1",
                                 "ports": [{"name": "http", "containerPort": 8080}]}]}}))
    ip = wait_for(lambda: cluster.kubectl("get", "pod", "lookalike", "-n", namespace, "-o",
                                          "jsonpath={.status.podIP}").stdout, timeout=60, message="kwok pod IP")
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(KWOK_CIDR)
    time.sleep(5)  # service discovery and relabelling run every 2 s: time enough to pick the pod up
    active = [t["discoveredLabels"]["__address__"] for t in targets(cluster)["activeTargets"]]
    real_pods, loopback = ipaddress.ip_network(POD_CIDR), ipaddress.ip_network("127.0.0.0/8")
    assert active and all(host(a) in real_pods or host(a) in loopback for a in active), active
    assert not [a for a in active if str(host(a)) == ip]


def test_the_operator_panels_queries_return_the_operators_series_through_prometheus(cluster, ocr, ocr_operator):
    """The dashboard's operator panels, run against the cluster's Prometheus scraping a real
    operator process (the fixture registers it as a loopback target). The rollbacks query has
    series only after a rollback; its counting is unit-tested (tests/unit/operator)."""
    require_local(cluster)
    # Scraped once before the first reconcile, so rate() sees the counters grow.
    up = f'up{{job="ocr-operator",namespace="{ocr.ns}"}} == 1'
    wait_for(lambda: cluster.prometheus_query(up), timeout=30, interval=0.5, message="the operator target is up")
    ocr.apply(ocrservice("web", replicas=1))
    ocr.wait_ready("web")
    ready = f'ocr_operator_ocrservice_conditions{{namespace="{ocr.ns}",type="Ready",status="True"}}'
    wait_for(lambda: [s for s in cluster.prometheus_query(ready) if float(s["value"][1]) == 1], timeout=30,
             interval=1, message="the Ready OcrService counted by ocr_operator_ocrservice_conditions")
    time.sleep(6)  # three more scrapes: rate() and histogram_quantile() need two samples after the reconciles
    board = json.loads(DASHBOARD.read_text())
    exprs = [(p["title"], t["refId"], t["expr"].replace("$__rate_interval", "1m"))
             for p in board["panels"] if p["title"].startswith("Operator:") for t in p["targets"]]
    assert len(exprs) == 5
    empty = [(title, ref) for title, ref, expr in exprs
             if "ocr_operator_rollbacks_total" not in expr
             and not cluster.prometheus_query(expr)]
    assert empty == []
    [reconciles] = [e for t, r, e in exprs if t == "Operator: reconciles and errors" and r == "A"]
    by_result = {s["metric"]["result"]: float(s["value"][1]) for s in cluster.prometheus_query(reconciles)}
    assert by_result["success"] > 0, by_result
