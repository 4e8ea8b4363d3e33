"""Prometheus metrics, one registry per app (tests build several apps in one process)."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

log = logging.getLogger("ocr_server.metrics")

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 30, 60, 120)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
VISUAL_BUCKETS = (256, 544, 688, 832, 976, 1120)
GENERATED_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
SPLIT_BUCKETS = (2, 3, 4, 6, 8, 12, 16)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ocr_requests", "OCR requests by endpoint and HTTP status", ["endpoint", "status"], registry=r)
        self.latency = Histogram("ocr_request_latency_seconds", "End-to-end latency of /v1/ocr and /v1/chat/completions (streams: until the last event)", buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("ocr_queue_depth", "Requests waiting for an engine slot plus pages waiting for a batch", registry=r)
        self.in_flight = Gauge("ocr_in_flight_requests", "Requests inside the engine (decode, crop, generate)", registry=r)
        self.batch_size = Histogram("ocr_batch_size", "Pages per generate call", buckets=BATCH_BUCKETS, registry=r)
        self.visual_tokens = Histogram("ocr_visual_tokens", "Visual tokens per page", buckets=VISUAL_BUCKETS, registry=r)
        self.generated_tokens = Histogram("ocr_generated_tokens", "Generated tokens per page", buckets=GENERATED_BUCKETS, registry=r)
        self.cache_hits = Counter("ocr_cache_hits", "Result cache hits", registry=r)
        self.cache_misses = Counter("ocr_cache_misses", "Result cache misses", registry=r)
        self.dropped = Counter("ocr_pages_dropped_expired", "Pages dropped before generate because their deadline passed", registry=r)
        self.model_loaded = Gauge("ocr_model_loaded", "1 when the model is loaded and serving", registry=r)
        self.warmup_seconds = Gauge("ocr_warmup_seconds", "Time the warm-up generations took before the server reported ready", registry=r)
        self.split_parts = Histogram("ocr_split_parts", "Parts a page was split into (SPLIT_PAGES / split=auto)", buckets=SPLIT_BUCKETS, registry=r)
        self.stream_disconnects = Counter("ocr_stream_disconnects", "Streamed requests whose client went away before the end", registry=r)
        self.gpu_util = Gauge("ocr_gpu_utilization_percent", "GPU utilisation (NVML), only with a GPU", registry=r)
        self.gpu_mem_used = Gauge("ocr_gpu_memory_used_bytes", "GPU memory used (NVML), only with a GPU", registry=r)
        self.gpu_mem_total = Gauge("ocr_gpu_memory_total_bytes", "GPU memory total (NVML), only with a GPU", registry=r)
        self.gpu_temp = Gauge("ocr_gpu_temperature_celsius", "GPU temperature (NVML), only with a GPU", registry=r)
        self.torch_mem = Gauge("ocr_torch_cuda_allocated_bytes", "Memory allocated by torch on the GPU", registry=r)
        self._gpu_index: int | None = None
        self._nvml = None

    def enable_gpu(self, index: int) -> None:
        self._gpu_index = index
        try:
            import pynvml  # nvidia-ml-py, optional extra "gpu"

            pynvml.nvmlInit()
            self._nvml = pynvml
        except Exception as exc:  # noqa: BLE001 - NVML is optional; torch figures remain
            log.info("NVML unavailable (%s); GPU utilisation will not be reported", exc)

    def refresh_gpu(self) -> None:
        if self._gpu_index is None:
            return
        try:
            import torch

            self.torch_mem.set(torch.cuda.memory_allocated(self._gpu_index))
            if self._nvml is not None:
                h = self._nvml.nvmlDeviceGetHandleByIndex(self._gpu_index)
                util = self._nvml.nvmlDeviceGetUtilizationRates(h)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
                self.gpu_util.set(util.gpu)
                self.gpu_mem_used.set(mem.used)
                self.gpu_mem_total.set(mem.total)
                self.gpu_temp.set(self._nvml.nvmlDeviceGetTemperature(h, 0))
        except Exception as exc:  # noqa: BLE001 - a metrics scrape must never fail
            log.debug("GPU metrics unavailable: %s", exc)

    def render(self) -> bytes:
        self.refresh_gpu()
        return generate_latest(self.registry)
