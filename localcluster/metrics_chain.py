"""The local cluster's metric chain: the one users run, from scrape to HPA.

    server pods on real-node-0 ──┐
    fake_dcgm_exporter (loopback)┼─> Prometheus ──> prometheus-adapter ──> APIService
    loopback targets (operator) ─┘   (3.10.0)       (v0.12.0, the chart's    custom.metrics.k8s.io
                                                     shipped rules)           ──> HPA controller

Why each piece is what it is:
- Prometheus and prometheus-adapter are built from the Go module proxy (build-metrics-binaries.sh;
  Debian's `prometheus` package, which promtool and the monitoring tests use, is built without
  the Kubernetes service discovery). Both run as host processes on 127.0.0.1, with the cluster's
  own credentials; no part of the chain is reimplemented here.
- The adapter loads `charts/causalflow-ocr/files/prometheus-adapter-values.yaml` as shipped (the
  list under `rules.custom`, which is what the prometheus-adapter chart writes into its config),
  so the e2e autoscaling tests test the rules users install.
- What Prometheus may connect to is closed in its relabelling: server pods only on the real node
  (`kubernetes_sd_configs` against the local API server, kept by node name *and* by an address in
  the real node's pod range, realnode.POD_CIDR), and targets on 127.0.0.1. kwok's pods have fake
  addresses (10.0.0.0/16) that nothing may ever reach; they are dropped before any scrape.
- DCGM's GPU metrics need a GPU, so they come from `fake_dcgm_exporter.py`, a stand-in that says
  so, serving real exposition text whose values tests set (`LocalCluster.set_metric`).
- Loopback processes that export metrics (the operator under test) register themselves with
  `add_scrape_target`: a file_sd file Prometheus re-reads every 2 s.
- The aggregator reaches the adapter on loopback through an ExternalName Service (`localhost`),
  the only way an APIService reaches a process outside the cluster without kube-proxy.
- Test speed: scrape and rule evaluation every 2 s, adapter series re-discovery every 2 s; the HPA
  controller syncs every 2 s (cluster.py).
- Its cost: idle, the chain (these three processes and the API server's aggregation of the
  adapter) takes about 7 % of a core. A cluster may run it only while a test needs it
  (`LocalCluster.start_metric_chain` / `stop_metric_chain`): the e2e tier's shared real-node
  cluster, where one module of twenty autoscales.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from localcluster.pki import self_signed
from localcluster.nodeconfig import NODE_NAME, POD_CIDR

if TYPE_CHECKING:
    from localcluster.cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = Path(__file__).with_name("build-metrics-binaries.sh")
ADAPTER_VALUES = REPO / "charts" / "causalflow-ocr" / "files" / "prometheus-adapter-values.yaml"
APISERVICE_VERSIONS = ("v1beta2", "v1beta1")
SCRAPE_INTERVAL = "2s"
SERVER_POD_LABEL = ("app.kubernetes.io/name", "causalflow-ocr")  # naming.py's labels on every server pod
DCGM_TARGET_LABELS = {"namespace": "causalflow-system", "pod": "dcgm-exporter", "service": "dcgm-exporter"}
# The chain's processes in the order `start` starts them; each listens on the port of its name (cluster.ports).
COMPONENTS = ("dcgm-exporter", "prometheus", "prometheus-adapter")


def built_binary(name: str, build: bool = True) -> Path:
    """`prometheus` or `prometheus-adapter`, built (minutes, once) into the version-keyed cache."""
    if build:
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True)
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-bin", name], check=True,
                         capture_output=True, text=True).stdout.strip()
    return Path(out)


def adapter_rules() -> dict:
    """The adapter's --config document: the shipped values' `rules.custom`, unchanged."""
    values = yaml.safe_load(ADAPTER_VALUES.read_text())
    return {"rules": values["rules"]["custom"]}


def pod_address_regex(cidr: str = POD_CIDR) -> str:
    """A relabel regex matching `<ip>:<port>` for exactly the addresses of a /24 (the real node's pods)."""
    net = ipaddress.ip_network(cidr)
    if net.prefixlen != 24:
        raise ValueError(f"{cidr}: only a /24 pod range is expressed as a regex here")
    prefix = str(net.network_address).rsplit(".", 1)[0].replace(".", r"\.")
    return prefix + r"\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9]):[0-9]+"


LOOPBACK_ADDRESS = r"127\.0\.0\.1:[0-9]+"


def prometheus_config(cluster: LocalCluster, token_file: Path, targets_dir: Path) -> dict:
    """Three jobs; every one ends in a `keep` on the target address (real-node pods or loopback)."""
    keep_loopback = {"source_labels": ["__address__"], "regex": LOOPBACK_ADDRESS, "action": "keep"}
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL,
                   "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                # What the OcrService's ServiceMonitor does in production: each server pod's `http`
                # port, labelled namespace / pod / service (= the OcrService) / container.
                "job_name": "ocr-server",
                "kubernetes_sd_configs": [{
                    "role": "pod", "api_server": cluster.server,
                    "tls_config": {"ca_file": str(cluster.workdir / "pki" / "ca.crt")},
                    "authorization": {"type": "Bearer", "credentials_file": str(token_file)},
                    "selectors": [{"role": "pod", "field": f"spec.nodeName={NODE_NAME}"}],
                }],
                "relabel_configs": [
                    {"source_labels": ["__meta_kubernetes_pod_node_name"], "regex": NODE_NAME, "action": "keep"},
                    {"source_labels": ["__address__"], "regex": pod_address_regex(), "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                     "regex": SERVER_POD_LABEL[1], "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http", "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Running", "action": "keep"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                    {"source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_instance"],
                     "target_label": "service"},
                ],
            },
            {
                # dcgm-exporter as kube-prometheus-stack scrapes it: its own namespace/pod labels
                # on the target, so the GPU's pod arrives as exported_namespace / exported_pod.
                "job_name": "dcgm-exporter",
                "static_configs": [{"targets": [f"127.0.0.1:{cluster.ports['dcgm-exporter']}"],
                                    "labels": DCGM_TARGET_LABELS}],
                "relabel_configs": [keep_loopback],
            },
            {
                "job_name": "loopback",
                "file_sd_configs": [{"files": [str(targets_dir / "*.json")], "refresh_interval": SCRAPE_INTERVAL}],
                "relabel_configs": [keep_loopback],
            },
        ],
    }


def start(cluster: LocalCluster) -> None:
    """Starts the fake DCGM exporter, Prometheus and prometheus-adapter, and registers the
    adapter as custom.metrics.k8s.io. Needs the API server and the cluster's kubeconfigs."""
    w = cluster.workdir / "metrics-chain"
    (w / "targets").mkdir(parents=True, exist_ok=True)
    ca = cluster.workdir / "pki" / "ca.crt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    cluster.start_component("dcgm-exporter", [
        sys.executable, "-m", "localcluster.fake_dcgm_exporter", f"--port={cluster.ports['dcgm-exporter']}",
        f"--apiserver={cluster.server}", f"--token={cluster.tokens['causalflow-dcgm-exporter']}", f"--ca={ca}",
    ], env=env)
    cluster.wait_ready("dcgm-exporter", lambda: _http_ok(f"http://127.0.0.1:{cluster.ports['dcgm-exporter']}/"), 30)

    token_file = w / "prometheus.token"
    token_file.write_text(cluster.tokens["causalflow-prometheus"])
    token_file.chmod(0o600)
    config = w / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(cluster, token_file, w / "targets"), sort_keys=False))
    prom_url = f"http://127.0.0.1:{cluster.ports['prometheus']}"
    cluster.start_component("prometheus", [
        str(built_binary("prometheus")), f"--config.file={config}", f"--storage.tsdb.path={w / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{cluster.ports['prometheus']}",
        "--storage.tsdb.retention.time=2h", "--log.level=warn",
    ])
    cluster.wait_ready("prometheus", lambda: _http_ok(prom_url + "/-/ready"), 60)

    rules = w / "adapter-rules.yaml"
    rules.write_text(yaml.safe_dump(adapter_rules(), sort_keys=False))
    cert, key = self_signed(cluster.workdir / "pki", "prometheus-adapter")
    kubeconfig = cluster.workdir / "metrics.kubeconfig"
    port = cluster.ports["prometheus-adapter"]
    cluster.start_component("prometheus-adapter", [
        str(built_binary("prometheus-adapter", build=False)), f"--prometheus-url={prom_url}/", f"--config={rules}",
        # Re-discover series every 2 s, among those seen in the last 30 s (the default window is the
        # relist interval: with 2 s scrapes a series could drop out between two looks).
        "--metrics-relist-interval=2s", "--metrics-max-age=30s", f"--lister-kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={w / 'adapter-certs'}",
        f"--tls-cert-file={cert}", f"--tls-private-key-file={key}", "--v=1",
    ])
    cluster.wait_ready("prometheus-adapter", lambda: _https_ok(f"https://127.0.0.1:{port}/healthz"), 60)
    docs: list[dict] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "causalflow-system"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "prometheus-adapter", "namespace": "causalflow-system"},
         "spec": {"type": "ExternalName", "externalName": "localhost", "ports": [{"name": "https", "port": port}]}},
    ]
    for v in APISERVICE_VERSIONS:
        docs.append({
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": f"{v}.custom.metrics.k8s.io"},
            "spec": {"group": "custom.metrics.k8s.io", "version": v, "insecureSkipTLSVerify": True,
                     "groupPriorityMinimum": 100, "versionPriority": 200 if v == "v1beta2" else 100,
                     "service": {"name": "prometheus-adapter", "namespace": "causalflow-system", "port": port}},
        })
    cluster.apply(docs)

    def available() -> bool:
        # Every version: kubectl's discovery fails a command while any APIService is unavailable.
        for v in APISERVICE_VERSIONS:
            status = cluster.api_get(f"/apis/apiregistration.k8s.io/v1/apiservices/{v}.custom.metrics.k8s.io")["status"]
            if not any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or ()):
                return False
            cluster.api_get(f"/apis/custom.metrics.k8s.io/{v}")
        return True

    cluster.wait_ready("custom-metrics APIServices", available, 60)


def stop(cluster: LocalCluster) -> None:
    """Undoes `start`: the APIServices first (an unavailable one fails kubectl's discovery and holds
    every namespace deletion), then the processes, newest first. Prometheus's data and the
    adapter's certificates stay in the work dir for a later `start`."""
    cluster.kubectl("delete", "apiservice", *(f"{v}.custom.metrics.k8s.io" for v in APISERVICE_VERSIONS),
                    "--ignore-not-found")
    for name in reversed(COMPONENTS):
        component = cluster.components.pop(name, None)
        if component is not None:
            component.stop()


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as r:
        return r.status == 200


def _https_ok(url: str) -> bool:
    import ssl

    ctx = ssl._create_unverified_context()  # the adapter's self-signed loopback certificate
    with urllib.request.urlopen(url, context=ctx, timeout=2) as r:
        return r.status == 200


# -- what tests use ---------------------------------------------------------------------------
def set_dcgm_metric(cluster: LocalCluster, namespace: str, metric: str, value: float | None,
                    pod: str | None = None) -> None:
    body = json.dumps({"namespace": namespace, "metric": metric, "value": value, "pod": pod}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{cluster.ports['dcgm-exporter']}/set", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        resp.read()


def query(cluster: LocalCluster, promql: str) -> list[dict]:
    """An instant query against the cluster's Prometheus: the result vector."""
    url = f"http://127.0.0.1:{cluster.ports['prometheus']}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]["result"]


def targets(cluster: LocalCluster) -> dict:
    """Prometheus's /api/v1/targets data: activeTargets and droppedTargets."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports['prometheus']}/api/v1/targets?state=any",
                                timeout=10) as r:
        return json.load(r)["data"]


def add_scrape_target(cluster: LocalCluster, name: str, address: str, labels: dict[str, str] | None = None) -> Path:
    """Has Prometheus scrape a loopback `address` (host:port) from now on; returns the file to
    delete (remove_scrape_target) when the process goes away."""
    path = cluster.workdir / "metrics-chain" / "targets" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # a chain started later reads it then
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [address], "labels": {"job": name, **(labels or {})}}]))
    tmp.rename(path)  # atomic: Prometheus never reads half a file
    return path


def remove_scrape_target(cluster: LocalCluster, name: str) -> None:
    (cluster.workdir / "metrics-chain" / "targets" / f"{name}.json").unlink(missing_ok=True)
