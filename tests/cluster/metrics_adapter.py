"""A custom-metrics API server for the local cluster: the boundary where a GPU metric pipeline
(DCGM exporter -> Prometheus -> prometheus-adapter) stands in production.

It serves `custom.metrics.k8s.io` (v1beta1 and v1beta2) for Pods metrics behind an APIService,
so the real HPA controller in kube-controller-manager evaluates `autoscaling/v2` Pods metrics
such as `DCGM_FI_DEV_GPU_UTIL`. The values are not measured: tests set them through a small
admin endpoint on 127.0.0.1, per namespace (every pod) or per pod. Pods are listed from the real
API server with the label selector the HPA sends, so the HPA sees exactly its pods.

Run: python -m tests.cluster.metrics_adapter --port P --admin-port A --cert C --key K
         --apiserver URL --token T --ca CA
"""

from __future__ import annotations

import argparse
import json
import ssl
import threading
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP = "custom.metrics.k8s.io"
VERSIONS = ("v1beta2", "v1beta1")
KNOWN_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "ocr_gpu_utilization_ratio", "ocr_queue_depth")


class Store:
    """Metric values: (namespace, metric) -> default value, and (namespace, metric, pod) -> value."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ns: dict[tuple[str, str], float] = {}
        self._pod: dict[tuple[str, str, str], float] = {}

    def set(self, namespace: str, metric: str, value: float | None, pod: str | None = None) -> None:
        with self._lock:
            if pod is None:
                key = (namespace, metric)
                self._ns.pop(key, None) if value is None else self._ns.__setitem__(key, value)
            else:
                pkey = (namespace, metric, pod)
                self._pod.pop(pkey, None) if value is None else self._pod.__setitem__(pkey, value)

    def get(self, namespace: str, metric: str, pod: str) -> float | None:
        with self._lock:
            if (namespace, metric, pod) in self._pod:
                return self._pod[(namespace, metric, pod)]
            return self._ns.get((namespace, metric))

    def metrics(self) -> set[str]:
        with self._lock:
            return {m for _, m in self._ns} | {m for _, m, _ in self._pod} | set(KNOWN_METRICS)


class ApiServerPods:
    """Lists pods from the real API server (bearer token, CA-verified TLS)."""

    def __init__(self, server: str, token: str, ca_file: str) -> None:
        self.server, self.token = server.rstrip("/"), token
        self.context = ssl.create_default_context(cafile=ca_file)

    def list(self, namespace: str, selector: str) -> list[str]:
        query = urllib.parse.urlencode({"labelSelector": selector}) if selector else ""
        req = urllib.request.Request(
            f"{self.server}/api/v1/namespaces/{namespace}/pods?{query}",
            headers={"Authorization": f"Bearer {self.token}"},
        )
        with urllib.request.urlopen(req, context=self.context, timeout=5) as resp:
            items = json.load(resp)["items"]
        return [p["metadata"]["name"] for p in items if not p["metadata"].get("deletionTimestamp")]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity(value: float) -> str:
    # Milli-units keep fractional utilisation exact enough for the HPA's ratio.
    return f"{int(round(value * 1000))}m"


def make_api_handler(store: Store, pods: ApiServerPods) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:  # quiet: the apiserver polls often
            return

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _not_found(self, message: str) -> None:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                             "message": message, "reason": "NotFound", "code": 404})

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urllib.parse.urlparse(self.path)
            # The aggregator forwards `*` percent-encoded (%2A).
            parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
            params = urllib.parse.parse_qs(url.query)
            if parts[:2] != ["apis", GROUP] or len(parts) < 3 or parts[2] not in VERSIONS:
                return self._not_found(f"{url.path} is not served here")
            version = parts[2]
            if len(parts) == 3:
                return self._send(200, {
                    "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{version}",
                    "resources": [{"name": f"pods/{m}", "singularName": "", "namespaced": True,
                                   "kind": "MetricValueList", "verbs": ["get"]}
                                  for m in sorted(store.metrics())],
                })
            # /apis/custom.metrics.k8s.io/<v>/namespaces/<ns>/pods/<name|*>/<metric>
            if len(parts) != 8 or parts[3] != "namespaces" or parts[5] != "pods":
                return self._not_found(f"{url.path}: only Pods metrics are served")
            namespace, name, metric = parts[4], parts[6], parts[7]
            selector = params.get("labelSelector", [""])[0]
            names = pods.list(namespace, selector) if name == "*" else [name]
            items = []
            for pod in names:
                value = store.get(namespace, metric, pod)
                if value is None:
                    continue
                item = {
                    "describedObject": {"kind": "Pod", "namespace": namespace, "name": pod, "apiVersion": "/v1"},
                    "timestamp": _now(), "windowSeconds": 30, "value": _quantity(value),
                }
                if version == "v1beta2":
                    item["metric"] = {"name": metric}
                else:
                    item["metricName"] = metric
                items.append(item)
            if not items:
                return self._not_found(f"no value of {metric} for pods in {namespace}")
            self._send(200, {"kind": "MetricValueList", "apiVersion": f"{GROUP}/{version}",
                             "metadata": {}, "items": items})

    return Handler


def make_admin_handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Admin(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:
            return

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                store.set(body["namespace"], body["metric"], body.get("value"), body.get("pod"))
                code, out = 200, b'{"ok": true}'
            except (KeyError, ValueError, TypeError) as exc:
                code, out = 400, json.dumps({"error": str(exc)}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def do_GET(self) -> None:  # noqa: N802 (readiness check for the harness)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    return Admin


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--admin-port", type=int, required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--apiserver", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--ca", required=True)
    args = ap.parse_args()

    store = Store()
    api = ThreadingHTTPServer(("127.0.0.1", args.port), make_api_handler(store, ApiServerPods(args.apiserver, args.token, args.ca)))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    api.socket = ctx.wrap_socket(api.socket, server_side=True)
    admin = ThreadingHTTPServer(("127.0.0.1", args.admin_port), make_admin_handler(store))
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    api.serve_forever()


if __name__ == "__main__":
    main()
