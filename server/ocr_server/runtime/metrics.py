"""Prometheus metrics, one registry per app (tests build several apps in one process).

Names follow Prometheus's conventions: base units in the name (``_seconds``, ``_bytes``,
``_celsius``, ``_ratio`` for 0..1 fractions, never percent), counters end in ``_total``
(prometheus_client appends it to a Counter's name), histograms and gauges of counts are named
after what they count (``_tokens``, ``_parts``). ``METRIC_NAMES`` lists every family the server
can export; the chart's alert rules and dashboard may only use these (a unit test checks it).

The GPU families exist only when the model runs on a GPU (``enable_gpu``): a CPU server exports
no GPU series rather than a misleading 0.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ocr_limits import TOKEN_STEPS
from ocr_limits.request_classes import CLASSES

log = logging.getLogger("ocr_server.metrics")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
VISUAL_BUCKETS = TOKEN_STEPS  # 256, 544, 688, 832, 976, 1120: one bucket per crop count
GENERATED_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
SPLIT_BUCKETS = (2, 3, 4, 6, 8, 12, 16)
PREPROCESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
RATIO_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1)
QUEUE_WAIT_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
SEND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
PREFILL_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)


# Every metric family the server exports, as it appears on /metrics (the histogram families also
# have _bucket/_count/_sum series). GPU_METRIC_NAMES only with a GPU.
CPU_METRIC_NAMES = (
    "ocr_requests_total", "ocr_request_latency_seconds", "ocr_queue_depth", "ocr_in_flight_requests",
    "ocr_batch_size", "ocr_visual_tokens", "ocr_generated_tokens", "ocr_cache_hits_total",
    "ocr_cache_misses_total", "ocr_pages_dropped_expired_total", "ocr_model_loaded", "ocr_warmup_seconds",
    "ocr_split_parts", "ocr_stream_disconnects_total", "ocr_secret_reloads_total", "ocr_preprocess_seconds",
    "ocr_preprocess_ratio", "ocr_queued_requests", "ocr_queue_wait_seconds", "ocr_requests_shed_total",
    "ocr_page_outcomes_total", "ocr_shadow_copies_total", "ocr_answer_send_seconds",
    "ocr_prefill_pages", "ocr_engine_busy_seconds_total",
)
# serving/outcome.py's outcomes (the runtime layer imports no serving module; a unit test pins them equal).
PAGE_OUTCOMES = ("ok", "loop", "truncated", "empty")
# What became of the /v1/ocr answers shadow pages considered (serving/shadow.py): judged (the held
# pod answered, its distance recorded), error (no answer: timeout, connection), dropped (the queue
# was full, the page too large, or the shadow disarmed before it was sent), or not copied: notOk,
# stream, noRetention (Cache-Control: no-store or X-OCR-Retention: none), notDrawn (not in the sample).
SHADOW_RESULTS = ("judged", "error", "dropped", "notOk", "stream", "noRetention", "notDrawn")
GPU_METRIC_NAMES = (
    "ocr_gpu_utilization_ratio", "ocr_gpu_memory_used_bytes", "ocr_gpu_memory_total_bytes",
    "ocr_gpu_temperature_celsius", "ocr_torch_cuda_allocated_bytes", "ocr_torch_cuda_max_allocated_bytes",
)
METRIC_NAMES = CPU_METRIC_NAMES + GPU_METRIC_NAMES


class Metrics:
    def __init__(self, revision: str = "") -> None:
        r = self.registry = CollectorRegistry()
        # revision: the operator's pod template revision (OCR_REVISION, from the pod's
        # ocr.causalflow.dev/revision label), so that quality is compared across revisions.
        self.revision = revision
        self.page_outcomes = Counter("ocr_page_outcomes", "Generated pages by reference-free outcome (ok; loop: the "
                                     "output repeats itself; truncated: the token budget ran out before the end; "
                                     "empty) and the pod's revision", ["outcome", "revision"], registry=r)
        for outcome in PAGE_OUTCOMES:
            self.page_outcomes.labels(outcome, revision)
        self.requests = Counter("ocr_requests", "OCR requests by endpoint, HTTP status and request class "
                                "(X-Request-Class: interactive or batch)", ["endpoint", "status", "class"], registry=r)
        self.latency = Histogram("ocr_request_latency_seconds", "End-to-end latency of /v1/ocr and /v1/chat/completions (streams: until the last event)", buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("ocr_queue_depth", "Requests waiting for an engine slot plus pages waiting for a batch", registry=r)
        self.queued = Gauge("ocr_queued_requests", "Requests waiting for an engine slot, by request class "
                            "(interactive ones are started first)", ["class"], registry=r)
        self.queue_wait = Histogram("ocr_queue_wait_seconds", "Time an admitted request waited for an engine slot, "
                                    "by request class (0 when a slot was free)", ["class"], buckets=QUEUE_WAIT_BUCKETS, registry=r)
        self.shed = Counter("ocr_requests_shed", "Requests answered 429 by admission, by request class (batch ones "
                            "from BATCH_QUEUE_THRESHOLD waiting, interactive ones from QUEUE_SIZE)", ["class"], registry=r)
        for request_class in CLASSES:  # every class's series exists from the start, at 0
            self.queued.labels(request_class)
            self.queue_wait.labels(request_class)
            self.shed.labels(request_class)
        self.in_flight = Gauge("ocr_in_flight_requests", "Requests inside the engine (decode, crop, generate)", registry=r)
        self.batch_size = Histogram("ocr_batch_size", "Pages (or split parts) decoded together: the rows of each decode step, observed once per step (generate: every row of its static batch until the longest ends; slots: the pages still decoding)", buckets=BATCH_BUCKETS, registry=r)
        # Why the server runs below the raw engine shows here: pages that trickle in from the
        # preprocessing workers join in small prefills, and the engine thread idles between pages.
        self.prefill_pages = Histogram("ocr_prefill_pages", "Pages prefilled together, observed once per prefill "
                                       "(slots: the waiting pages that joined in one vision and language-model pass; "
                                       "generate: the pages of one batch)", buckets=PREFILL_BUCKETS, registry=r)
        self.engine_busy = Counter("ocr_engine_busy_seconds", "Time the engine thread spent working, by work: prefill "
                                   "and decode (slots), generate (generate: prefill and decode in one call); its rate "
                                   "is the share of the time the engine was busy (transformers engine only)",
                                   ["work"], registry=r)
        self.visual_tokens = Histogram("ocr_visual_tokens", "Visual tokens per page", buckets=VISUAL_BUCKETS, registry=r)
        self.generated_tokens = Histogram("ocr_generated_tokens", "Generated tokens per page", buckets=GENERATED_BUCKETS, registry=r)
        self.preprocess = Histogram("ocr_preprocess_seconds", "Time a request's document took to be decoded, rasterised, "
                                    "split, cropped and normalised on a worker thread, outside the model", buckets=PREPROCESS_BUCKETS, registry=r)
        self.preprocess_ratio = Histogram("ocr_preprocess_ratio", "Share of a request's time (not served from the cache) "
                                          "spent preprocessing its pages, outside the model: preprocess / total", buckets=RATIO_BUCKETS, registry=r)
        self.cache_hits = Counter("ocr_cache_hits", "Result cache hits", registry=r)
        self.cache_misses = Counter("ocr_cache_misses", "Result cache misses", registry=r)
        self.dropped = Counter("ocr_pages_dropped_expired", "Pages dropped before generate because their deadline passed", registry=r)
        self.model_loaded = Gauge("ocr_model_loaded", "1 when the model is loaded and serving", registry=r)
        self.warmup_seconds = Gauge("ocr_warmup_seconds", "Time the warm-up generations took before the server reported ready", registry=r)
        self.split_parts = Histogram("ocr_split_parts", "Parts a page was split into (SPLIT_PAGES / split=auto)", buckets=SPLIT_BUCKETS, registry=r)
        self.stream_disconnects = Counter("ocr_stream_disconnects", "Streamed requests whose client went away before the end", registry=r)
        self.reloads = Counter("ocr_secret_reloads", "New API_KEYS_FILE or TLS certificate content tried while serving, "
                               "by secret (api_keys, gate_keys, tls) and result (ok; failed: the loaded one stays)",
                               ["secret", "result"], registry=r)
        self.shadow_copies = Counter("ocr_shadow_copies", "POST /v1/ocr answers shadow pages considered while armed, "
                                     "by result: judged, error, dropped, or why not copied (notOk, stream, "
                                     "noRetention, notDrawn)", ["result"], registry=r)
        for result in SHADOW_RESULTS:
            self.shadow_copies.labels(result)
        self.answer_send = Histogram("ocr_answer_send_seconds", "Time from a /v1/ocr answer being ready to its last "
                                     "byte handed to the connection, by whether shadow pages copy it (sampled, none)",
                                     ["shadow"], buckets=SEND_BUCKETS, registry=r)
        for shadow in ("sampled", "none"):
            self.answer_send.labels(shadow)
        self._gpu_index: int | None = None
        self._nvml = None

    def page_outcome(self, outcome: str) -> None:
        self.page_outcomes.labels(outcome, self.revision).inc()

    def enable_gpu(self, index: int) -> None:
        """Register the GPU families: torch's always, NVML's only when NVML answers."""
        if self._gpu_index is not None:
            return
        r = self.registry
        self.torch_mem = Gauge("ocr_torch_cuda_allocated_bytes", "Memory allocated by torch on the GPU", registry=r)
        self.torch_mem_peak = Gauge("ocr_torch_cuda_max_allocated_bytes", "Peak memory allocated by torch on the GPU since the process started", registry=r)
        self._gpu_index = index
        try:
            import pynvml  # nvidia-ml-py, optional extra "gpu"

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - NVML is optional; torch figures remain
            log.info("NVML unavailable (%s); GPU utilisation will not be reported", exc)
            return
        self.gpu_util = Gauge("ocr_gpu_utilization_ratio", "GPU utilisation (NVML), 0..1", registry=r)
        self.gpu_mem_used = Gauge("ocr_gpu_memory_used_bytes", "GPU memory used (NVML)", registry=r)
        self.gpu_mem_total = Gauge("ocr_gpu_memory_total_bytes", "GPU memory total (NVML)", registry=r)
        self.gpu_temp = Gauge("ocr_gpu_temperature_celsius", "GPU temperature (NVML)", registry=r)

    def refresh_gpu(self) -> None:
        if self._gpu_index is None:
            return
        try:
            import torch

            self.torch_mem.set(torch.cuda.memory_allocated(self._gpu_index))
            self.torch_mem_peak.set(torch.cuda.max_memory_allocated(self._gpu_index))
            if self._nvml is not None:
                h = self._nvml.nvmlDeviceGetHandleByIndex(self._gpu_index)
                util = self._nvml.nvmlDeviceGetUtilizationRates(h)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                self.gpu_util.set(util.gpu / 100.0)
                self.gpu_mem_used.set(mem.used)
                self.gpu_mem_total.set(mem.total)
                self.gpu_temp.set(self._nvml.nvmlDeviceGetTemperature(h, 0))
        except Exception as exc:  # noqa: BLE001 - a metrics scrape must never fail
            log.debug("GPU metrics unavailable: %s", exc)

    def render(self) -> bytes:
        self.refresh_gpu()
        return generate_latest(self.registry)
