"""A stand-in for NVIDIA's dcgm-exporter: the one part of the local cluster's metric chain that
cannot be real, because DCGM's GPU metrics need a GPU and this machine has none.

It is only a data source. Everything after it is the production chain: Prometheus scrapes it (a
static target on 127.0.0.1), prometheus-adapter serves the series with the rules the chart ships,
the API server's aggregator proxies `custom.metrics.k8s.io` to the adapter and the HPA controller
of kube-controller-manager reads them. So it serves what dcgm-exporter serves, real Prometheus
exposition text, one series per GPU with the pod it is attributed to:

    DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-...",device="nvidia0",modelName="NVIDIA H200",
                         Hostname="gpu-node-0",container="server",namespace="ns",pod="web-abc"} 42

and tests choose the values: POST /set {"metric": "DCGM_FI_DEV_GPU_UTIL", "namespace": "ns",
"value": 42, "pod": null} sets one pod's value, or with no pod every pod of the namespace that
requests an `nvidia.com/gpu` (dcgm-exporter attributes a GPU only to a container that requests one,
through the kubelet's pod-resources API; this reads the pods from the API server instead, at every
scrape, so scaled-up pods get their series as they appear). A null value removes the setting.
Only DCGM_FI_* names are accepted: the server's own metrics come from real server pods.

Run: python -m localcluster.fake_dcgm_exporter --port P --apiserver URL --token T --ca CA
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import ssl
import threading
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GPU_RESOURCE = "nvidia.com/gpu"
METRIC_NAME = re.compile(r"^DCGM_FI_[A-Z0-9_]+$")
# dcgm-exporter's HELP/TYPE for the families tests use; others are exported as gauges too.
HELP = {"DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
        "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
        "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB)."}


class Settings:
    """(metric, namespace) -> value for every GPU pod there, (metric, namespace, pod) -> value."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ns: dict[tuple[str, str], float] = {}
        self._pod: dict[tuple[str, str, str], float] = {}

    def set(self, metric: str, namespace: str, value: float | None, pod: str | None) -> None:
        if not METRIC_NAME.match(metric):
            raise ValueError(f"{metric!r} is not a DCGM field name (DCGM_FI_...)")
        with self._lock:
            table, key = (self._ns, (metric, namespace)) if pod is None else (self._pod, (metric, namespace, pod))
            if value is None:
                table.pop(key, None)
            else:
                table[key] = float(value)

    def snapshot(self) -> tuple[dict, dict]:
        with self._lock:
            return dict(self._ns), dict(self._pod)


class ApiServerPods:
    """Lists a namespace's live pods that request a GPU, with their node, from the real API server."""

    def __init__(self, server: str, token: str, ca_file: str) -> None:
        self.server, self.token = server.rstrip("/"), token
        self.context = ssl.create_default_context(cafile=ca_file)

    def gpu_pods(self, namespace: str) -> list[tuple[str, str, str]]:
        """(pod, container, node) of each pod with a container requesting nvidia.com/gpu."""
        req = urllib.request.Request(f"{self.server}/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods",
                                     headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(req, context=self.context, timeout=5) as resp:
            items = json.load(resp)["items"]
        out = []
        for p in items:
            if p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Succeeded", "Failed"):
                continue
            for c in p["spec"]["containers"]:
                if int((c.get("resources", {}).get("limits") or {}).get(GPU_RESOURCE, 0) or 0) > 0:
                    out.append((p["metadata"]["name"], c["name"], p["spec"].get("nodeName") or ""))
                    break
        return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(settings: Settings, pods: ApiServerPods) -> str:
    """The current series in Prometheus's text format (version 0.0.4)."""
    by_ns, by_pod = settings.snapshot()
    series: dict[str, dict[tuple[str, str], tuple[float, str, str]]] = {}
    for (metric, ns), value in by_ns.items():
        try:
            listed = pods.gpu_pods(ns)
        except OSError:
            continue  # the namespace is gone or the API server restarts: no series, like a lost GPU
        for pod, container, node in listed:
            series.setdefault(metric, {})[(ns, pod)] = (value, container, node)
    for (metric, ns, pod), value in by_pod.items():
        _, container, node = series.get(metric, {}).get((ns, pod), (None, "server", ""))
        series.setdefault(metric, {})[(ns, pod)] = (value, container, node)
    lines = []
    for metric in sorted(series):
        lines.append(f"# HELP {metric} {HELP.get(metric, metric)}")
        lines.append(f"# TYPE {metric} gauge")
        for gpu, ((ns, pod), (value, container, node)) in enumerate(sorted(series[metric].items())):
            uuid = hashlib.sha1(f"{ns}/{pod}".encode()).hexdigest()
            labels = {"gpu": str(gpu % 8), "UUID": f"GPU-{uuid[:8]}-{uuid[8:12]}-{uuid[12:16]}-{uuid[16:28]}",
                      "device": f"nvidia{gpu % 8}", "modelName": "NVIDIA H200", "Hostname": node,
                      "container": container, "namespace": ns, "pod": pod}
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{metric}{{{body}}} {value:g}")
    return "\n".join(lines) + "\n"


def make_handler(settings: Settings, pods: ApiServerPods) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:  # quiet: scraped every 2 s
            return

        def _reply(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] == "/metrics":
                return self._reply(200, exposition(settings, pods).encode(), "text/plain; version=0.0.4")
            self._reply(200 if self.path == "/" else 404, b"ok", "text/plain")

        def do_POST(self) -> None:  # noqa: N802
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                settings.set(body["metric"], body["namespace"], body.get("value"), body.get("pod"))
                self._reply(200, b'{"ok": true}', "application/json")
            except (KeyError, ValueError, TypeError) as exc:
                self._reply(400, json.dumps({"error": str(exc)}).encode(), "application/json")

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--apiserver", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--ca", required=True)
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port),
                                 make_handler(Settings(), ApiServerPods(args.apiserver, args.token, args.ca)))
    server.serve_forever()


if __name__ == "__main__":
    main()
