"""Every dashboard query the server can answer, run against a real Prometheus scraping a real server.

`python -m ocr_server` with the tiny model (WARMUP=0) on 127.0.0.1, Debian's `prometheus` on
127.0.0.1 scraping only it every second (storage in a tmp dir) with the chart's alert rules
loaded, a few OCR requests, then each panel query through Prometheus's HTTP API: each returns series.

The operator's panels run against the local cluster's Prometheus scraping a real operator
(tests/e2e/test_metrics_chain.py). What cannot have a real source here, and is checked by name instead (tests/monitoring,
promql_names.EXTERNAL and the GPU list of ocr_server.metrics): dcgm-exporter's DCGM_FI_DEV_*
(no GPU), the server's own GPU families (only with a GPU), the kubelet's prober_probe_total and
kube-state-metrics' series (no cluster in this test).
"""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest

from ocr_server.runtime.metrics import CPU_METRIC_NAMES
from localcluster.imagebuild import ensure_tiny_model
from localcluster.ports import free_port
from tests.server import samples
from tests.server.conftest import ROOT, start_server
from tests.monitoring.common import DASHBOARD, RULES, alert_rules, binary
from tests.monitoring.promql_names import SERVER_CPU, metric_names

NAMESPACE, SERVICE, POD = "ocr-test", "invoices", "invoices-0"


def substitute(expr: str) -> str:
    return (expr.replace("$namespace", NAMESPACE).replace("$service", SERVICE)
            .replace("$__rate_interval", "20s").replace("$__range", "5m"))


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("monitoring")
    # the tiny model the image builds bake in: written once per generator version, then reused
    model = ROOT / ensure_tiny_model(lambda line: None)
    server = start_server(tmp, {"MODEL_PATH": str(model), "MAX_NEW_TOKENS": "6", "BATCH_WAIT_MS": "20",
                                "CONCURRENCY": "4", "BATCH_SIZE": "4"})
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{
            "job_name": SERVICE,
            "static_configs": [{"targets": [server.url.removeprefix("http://")],
                                "labels": {"namespace": NAMESPACE, "service": SERVICE, "pod": POD}}],
        }],
    }))
    log = (tmp / "prometheus.log").open("wb")
    prom = subprocess.Popen([binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert prom.poll() is None, (tmp / "prometheus.log").read_text()[-3000:]
            try:
                if httpx.get(url + "/-/ready", timeout=2, verify=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "prometheus never became ready"
            time.sleep(0.2)
        yield server, url
    finally:
        prom.terminate()
        try:
            prom.wait(15)
        except subprocess.TimeoutExpired:
            prom.kill()
            prom.wait(5)
        server.stop()


def query(url: str, expr: str) -> list[dict]:
    # Plain HTTP on loopback: verify=False only spares loading the CA bundle a client would never
    # use (25 ms of CPU a call: one a poll until the scrape lands, one a dashboard panel).
    body = httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=10, verify=False).json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def test_every_server_panel_query_returns_series(stack):
    server, url = stack
    pages = [samples.png(320, 200, seed=s) for s in (1, 2, 3)]
    with server.client() as c:
        for data in pages + pages[:1]:  # the repeat is a cache hit
            r = c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")})
            assert r.status_code == 200, r.text
        assert c.post("/v1/ocr", files={"file": ("p.txt", b"not an image", "text/plain")}).status_code == 415
    # the requests are in Prometheus, with a few scrapes after them for rate()
    deadline = time.monotonic() + 30
    while True:
        got = query(url, f'sum(ocr_requests_total{{namespace="{NAMESPACE}", service="{SERVICE}"}})')
        if got and float(got[0]["value"][1]) == 5:
            break
        assert time.monotonic() < deadline, got
        time.sleep(0.5)
    time.sleep(3)

    dashboard = json.loads(DASHBOARD.read_text())
    live, by_name = [], []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            if names <= SERVER_CPU:
                live.append((panel["title"], target["refId"], substitute(target["expr"])))
            else:
                by_name.append(panel["title"])
    empty = [(title, ref, expr) for title, ref, expr in live if not query(url, expr)]
    assert empty == []
    # most of the board is the server's own; what is not is GPU or cluster state (see docstring)
    assert len(live) >= 15 and set(by_name) <= {"GPU utilisation", "GPU memory and its peak", "Replicas vs desired",
                                                 "Rollout phase", "Rollouts and rollbacks in range",
                                                 # the operator's: run against the cluster's chain (tests/e2e/test_metrics_chain.py)
                                                 "Operator: reconciles and errors", "Operator: reconcile duration p95",
                                                 "Operator: OcrServices by phase and rollbacks by reason",
                                                 # the operator's, per OcrService (the quality gate's verdict)
                                                 "Quality gate: distance of the last verdict",
                                                 # kube-state-metrics' OcrBatch series: checked by name
                                                 "OcrBatches: pages done and failed, batches waiting for workers "
                                                 "or suspended"}

    # the figures are the requests just sent, not merely present
    assert float(query(url, substitute('sum(ocr_cache_hits_total{namespace=~"$namespace", service=~"$service"})'))[0]["value"][1]) == 1
    status = {s["metric"]["status"] for s in query(url, 'ocr_requests_total{endpoint="/v1/ocr"}')}
    assert status == {"200", "415"}

    # the live /metrics exports exactly the families ocr_server.metrics declares for a CPU server
    text = httpx.get(server.url + "/metrics", timeout=10).text
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    assert {f for f in families if not f.endswith("_created")} == set(CPU_METRIC_NAMES)

    # the template variables' queries find this service
    namespaces = httpx.get(url + "/api/v1/label/namespace/values", params={"match[]": "ocr_requests_total"}).json()["data"]
    services = httpx.get(url + "/api/v1/label/service/values",
                         params={"match[]": f'ocr_requests_total{{namespace=~"{NAMESPACE}"}}'}).json()["data"]
    assert NAMESPACE in namespaces and SERVICE in services


def test_prometheus_loads_and_evaluates_the_chart_alert_rules(stack):
    _, url = stack
    deadline = time.monotonic() + 20
    while True:
        groups = httpx.get(url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        if rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert {rule["name"] for rule in rules} == {rule["alert"] for rule in alert_rules()}
    assert [rule["name"] for rule in rules if rule["health"] != "ok"] == []
    # A healthy server fires nothing, except the p95-latency alert where this machine was really that
    # slow (a busy 2-core machine can take > 5 s per tiny-model page): then its expression must hold.
    def holds(expr: str) -> bool:
        return bool(httpx.get(url + "/api/v1/query", params={"query": expr}, timeout=10).json()["data"]["result"])

    active = [rule for rule in rules if rule["state"] != "inactive"]
    assert [rule["name"] for rule in active if rule["name"] != "OcrLatencyP95High" or not holds(rule["query"])] == []
