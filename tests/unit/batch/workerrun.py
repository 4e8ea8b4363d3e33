"""The worker run in this process over real folders (FileStore) or any real Store, against a real
HTTP server (pageserver.PageServer, or none: a free port), as program.serve runs it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ocr_batch_worker import config
from ocr_batch_worker.client import OcrClient
from ocr_batch_worker.patience import Outage, PatientStore
from ocr_batch_worker.progress import Progress
from ocr_batch_worker.storage import FileStore, Store
from ocr_batch_worker.worker import Worker


def worker_config(tmp: Path, url: str, **over: Any) -> config.WorkerConfig:
    doc = {"serviceUrl": url, "input": {"pvc": {"path": str(tmp / "in")}},
           "output": {"pvc": {"path": str(tmp / "out")}}, "maxRetries": 0, "requestTimeoutSeconds": 5,
           "progressIntervalSeconds": 3600, **over}
    return config.parse(doc, 0)


def run(cfg: config.WorkerConfig, source: Store | None = None, sink: Store | None = None) -> Progress:
    async def go() -> Progress:
        client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=cfg.request_timeout)
        outage = Outage(cfg.storage_retry_seconds)
        try:
            worker = Worker(cfg, PatientStore(source or FileStore(cfg.input.path), outage),
                            PatientStore(sink or FileStore(cfg.output.path), outage), client.send,
                            emit=lambda report: None)
            return await worker.run()
        finally:
            await client.close()

    return asyncio.run(go())
