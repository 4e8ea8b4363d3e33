"""The operator's own Prometheus metrics, served on `--metrics-port` (default 8081, /metrics).

Why: the OcrServices' state reaches Prometheus through kube-state-metrics only where someone
configured its custom-resource-state (the chart ships that configuration), and nothing else says
whether the operator itself keeps up. These answer "is it reconciling, how fast, does it fail,
what did it roll back, in what state are the services it runs" from the operator alone.

Names follow Prometheus's conventions (base units, `_total` counters, `_seconds`); the chart's
rules and dashboard use them and tests/monitoring checks that every name they use is one
declared here (NAMES):

  ocr_operator_reconciles_total{result}              reconciles finished: success | error
  ocr_operator_reconcile_errors_total{kind}          failed reconciles: api (the API server said no) | unexpected (a bug)
  ocr_operator_reconcile_duration_seconds            histogram of one reconcile, successful or not
  ocr_operator_rollbacks_total{reason}               automatic rollbacks by the failed revision's reason
                                                     (CrashLoopBackOff, ImagePullBackOff, ReadinessTimeout, ...)
  ocr_operator_ocrservices{phase}                    OcrServices by rollout phase (Healthy, Progressing, RolledBack, ...)
  ocr_operator_ocrservice_conditions{type,status}    OcrServices by condition (Ready=True, Degraded=False, ...)
  ocr_operator_workqueue_depth                       keys waiting for a reconcile
  ocr_operator_quality_gate_distance{namespace,ocrservice,stat}  the quality gate's last verdict (golden, shadow)
                                                     (status.qualityGate): mean or worst page distance, 0..1
  ocr_operator_model_fetch_ratio{namespace,ocrservice}  the weights' fetch from S3 under way (status.modelFetch):
                                                     bytes fetched over the model's, 0..1; absent when no pod fetches
  ocr_operator_api_requests_total{method,resource}   requests the operator sent to the API server (client-go's
                                                     rest_client_requests_total): PATCH ocrservices/status, POST events, ...

The by-state gauges are computed at scrape time from the OcrService controller's cache, so they
cost nothing between scrapes and never drift from what the operator sees. Only the event loop's
thread mutates the cache; a scrape reads a snapshot of it (dict copies) and tolerates a
concurrent change by retrying once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ocr_operator.runtime.controller import Controller

# Reconciles read a cache and usually write nothing: milliseconds; a first apply of every child
# over a slow API server can take seconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
NAMES = ("ocr_operator_reconciles_total", "ocr_operator_reconcile_errors_total",
         "ocr_operator_reconcile_duration_seconds", "ocr_operator_rollbacks_total",
         "ocr_operator_ocrservices", "ocr_operator_ocrservice_conditions", "ocr_operator_workqueue_depth",
         "ocr_operator_api_requests_total", "ocr_operator_quality_gate_distance", "ocr_operator_model_fetch_ratio")


class StateCollector(Collector):
    """OcrServices by phase and by condition, the queue depth and the API requests sent, from the
    controller at scrape time."""

    def __init__(self) -> None:
        self.controller: Controller | None = None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        phases = GaugeMetricFamily("ocr_operator_ocrservices", "OcrServices by rollout phase", labels=["phase"])
        conds = GaugeMetricFamily("ocr_operator_ocrservice_conditions",
                                  "OcrServices by condition type and status", labels=["type", "status"])
        depth = GaugeMetricFamily("ocr_operator_workqueue_depth", "OcrService keys waiting for a reconcile")
        requests = CounterMetricFamily("ocr_operator_api_requests", "Requests sent to the Kubernetes API server",
                                       labels=["method", "resource"])
        gate = GaugeMetricFamily("ocr_operator_quality_gate_distance",
                                 "The quality gate's last verdict per OcrService: mean or worst page normalised edit "
                                 "distance (0..1) of the golden pages (stat mean, worst) and of the shadow sample "
                                 "(shadowMean, shadowWorst)", labels=["namespace", "ocrservice", "stat"])
        fetch = GaugeMetricFamily("ocr_operator_model_fetch_ratio",
                                  "The weights' fetch from S3 under way per OcrService: bytes fetched over the "
                                  "model's (0..1)", labels=["namespace", "ocrservice"])
        c = self.controller
        if c is not None:
            by_phase: dict[str, int] = {}
            by_cond: dict[tuple[str, str], int] = {}
            for obj in _snapshot(c):
                st = obj.get("status") or {}
                phase = (st.get("rollout") or {}).get("phase") or "Unknown"
                by_phase[phase] = by_phase.get(phase, 0) + 1
                for cond in st.get("conditions") or ():
                    key = (str(cond.get("type")), str(cond.get("status")))
                    by_cond[key] = by_cond.get(key, 0) + 1
                if (progress := st.get("modelFetch") or {}).get("percent") is not None:
                    md = obj.get("metadata") or {}
                    fetch.add_metric([str(md.get("namespace")), str(md.get("name"))], float(progress["percent"]) / 100)
                verdict = st.get("qualityGate") or {}
                if verdict.get("phase") in ("Passed", "Failed") and verdict.get("meanDistance") is not None:
                    md = obj.get("metadata") or {}
                    where = [str(md.get("namespace")), str(md.get("name"))]
                    gate.add_metric(where + ["mean"], float(verdict["meanDistance"]))
                    gate.add_metric(where + ["worst"], float(verdict.get("worstDistance") or 0.0))
                    shadow = verdict.get("shadow") or {}
                    if shadow.get("pages") and shadow.get("meanDistance") is not None:  # a shadow sample was judged
                        gate.add_metric(where + ["shadowMean"], float(shadow["meanDistance"]))
                        gate.add_metric(where + ["shadowWorst"], float(shadow.get("worstDistance") or 0.0))
            for phase, n in sorted(by_phase.items()):
                phases.add_metric([phase], n)
            for (type_, status), n in sorted(by_cond.items()):
                conds.add_metric([type_, status], n)
            depth.add_metric([], len(c.queue))
            for what, n in sorted(dict(getattr(c.kube, "by_request", None) or {}).items()):
                method, _, resource = what.partition(" ")
                requests.add_metric([method, resource], n)
        yield phases
        yield conds
        yield depth
        yield requests
        yield gate
        yield fetch


def _snapshot(c: Controller) -> list[dict]:
    for _ in range(2):
        try:
            return list(c.cache.values())
        except RuntimeError:  # the event loop changed the dict meanwhile: look again
            time.sleep(0)
    return []


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.reconciles = Counter("ocr_operator_reconciles", "Reconciles finished, by result", ["result"], registry=r)
        self.errors = Counter("ocr_operator_reconcile_errors",
                              "Reconciles that failed: api (an API server error) or unexpected (a bug)", ["kind"],
                              registry=r)
        self.duration = Histogram("ocr_operator_reconcile_duration_seconds", "Duration of one reconcile",
                                  buckets=DURATION_BUCKETS, registry=r)
        self.rollbacks = Counter("ocr_operator_rollbacks",
                                 "Automatic rollbacks, by the failed revision's reason", ["reason"], registry=r)
        self.state = StateCollector()
        r.register(self.state)
        for result in ("success", "error"):  # every series exists from the start: rate() sees the first one
            self.reconciles.labels(result)
        for kind in ("api", "unexpected"):
            self.errors.labels(kind)

    def reconciled(self, seconds: float) -> None:
        self.reconciles.labels("success").inc()
        self.duration.observe(seconds)

    def failed(self, kind: str, seconds: float) -> None:
        self.reconciles.labels("error").inc()
        self.errors.labels(kind).inc()
        self.duration.observe(seconds)

    def rolled_back(self, reason: str | None) -> None:
        self.rollbacks.labels(reason or "Unknown").inc()

    def serve(self, port: int, host: str = "0.0.0.0") -> None:
        """Serve /metrics from a daemon thread (prometheus_client's own HTTP server)."""
        start_http_server(port, addr=host, registry=self.registry)


METRICS = OperatorMetrics()
