"""The serving object: one OCR request from bytes+options to a response dict.

Order matters: options are validated and the cache consulted before a slot is taken; decoding and
cropping run in a thread pool (never on the event loop); pages go to the batcher; the response is
assembled and cached. Errors are OcrError subclasses; routes map them with errors.error_response.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .batching import Admission, Batcher
from .cache import ResultCache, cache_key
from .config import ServerConfig
from .documents import load_document, parse_pages
from .errors import BadInput, ModelLoading, OcrError
from .metrics import Metrics
from .parsing import parse_output
from .protocol import OcrOptions

log = logging.getLogger("ocr_server.service")
PAGE_SPLIT = "\n<--- Page Split --->\n"


def decode_base64(data: str) -> bytes:
    if data.startswith("data:"):
        data = data.split(",", 1)[-1]
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput("the 'image' field is not valid base64", param="image") from None


class OcrService:
    def __init__(self, cfg: ServerConfig, engine: Any, metrics: Metrics) -> None:
        self.cfg, self.engine, self.metrics = cfg, engine, metrics
        self.cache = ResultCache(cfg.service.cache_entries)
        self.pool = ThreadPoolExecutor(max_workers=cfg.runtime.preprocess_workers, thread_name_prefix="preprocess")
        self.ready = False
        self.load_error: str | None = None
        self.admission: Admission | None = None
        self.batcher: Batcher | None = None

    def start(self, on_fatal) -> None:
        """Called on the event loop once the engine is loaded."""
        r = self.cfg.runtime
        self.admission = Admission(r.concurrency, r.queue_size, self.metrics)
        self.batcher = Batcher(self.engine.generate_batch, batch_size=r.batch_size, wait_s=r.batch_wait_ms / 1000,
                               metrics=self.metrics, on_fatal=on_fatal)
        self.batcher.start()
        self.ready = True
        self.metrics.model_loaded.set(1)

    async def stop(self) -> None:
        if self.batcher:
            await self.batcher.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _prepare_all(self, data: bytes, opts: OcrOptions, max_new: int, deadline: float) -> tuple[str, list, float]:
        t0 = time.monotonic()
        s = self.cfg.service
        fmt, pages = load_document(data, pages=parse_pages(opts.pages), max_pages=s.max_pages, pdf_dpi=s.pdf_dpi,
                                   max_pixels=s.max_image_pixels)
        prepared = []
        for page in pages:
            item = self.engine.prepare(page.image, prompt_mode=opts.prompt_mode, max_visual_tokens=opts.max_visual_tokens,
                                       max_new_tokens=max_new)
            item.deadline = deadline
            prepared.append((page.number, item))
        return fmt, prepared, time.monotonic() - t0

    async def ocr(self, data: bytes, opts: OcrOptions) -> dict:
        if not self.ready:
            raise ModelLoading("the model is still loading", retry_after=5)
        t_start = time.monotonic()
        r = self.cfg.runtime
        timeout = min(opts.timeout_sec or r.timeout_sec, r.timeout_sec)
        deadline = t_start + timeout
        max_new = min(opts.max_new_tokens or r.max_new_tokens, r.max_new_tokens)
        key_opts = opts.model_dump(exclude={"timeout_sec"})
        key_opts["max_new_tokens"] = max_new
        key = cache_key(data, key_opts, self.engine.info.revision)
        hit = self.cache.get(key)
        if hit is not None:
            self.metrics.cache_hits.inc()
            return {**hit, "cached": True, "timings": {"total_ms": round((time.monotonic() - t_start) * 1000, 2)}}
        self.metrics.cache_misses.inc()

        async with self.admission.slot(deadline):
            t_admitted = time.monotonic()
            loop = asyncio.get_running_loop()
            fmt, prepared, prep_s = await loop.run_in_executor(self.pool, self._prepare_all, data, opts, max_new, deadline)
            t_gen = time.monotonic()
            try:
                results = await asyncio.gather(*(self.batcher.submit(item) for _, item in prepared))
            except OcrError:
                for _, item in prepared:
                    item.cancelled.set()
                raise
            t_done = time.monotonic()

        pages_out = []
        for (number, item), gen in zip(prepared, results):
            parsed = parse_output(gen.raw, item.plan.width, item.plan.height, page=number)
            self.metrics.visual_tokens.observe(item.plan.visual_tokens)
            self.metrics.generated_tokens.observe(len(gen.token_ids))
            pages_out.append({
                "page": number,
                "text": parsed.text,
                "raw": parsed.raw,
                "blocks": [b.as_dict() for b in parsed.blocks],
                "layout": item.plan.as_layout(),
                "usage": {"visual_tokens": item.plan.visual_tokens, "generated_tokens": len(gen.token_ids), "pages": 1},
                "finished": gen.finished,
            })
        info = self.engine.info
        response = {
            "text": PAGE_SPLIT.join(p["text"] for p in pages_out),
            "raw": PAGE_SPLIT.join(p["raw"] for p in pages_out),
            "blocks": [b for p in pages_out for b in p["blocks"]],
            "layout": pages_out[0]["layout"],
            "pages": pages_out,
            "usage": {
                "visual_tokens": sum(p["usage"]["visual_tokens"] for p in pages_out),
                "generated_tokens": sum(p["usage"]["generated_tokens"] for p in pages_out),
                "pages": len(pages_out),
            },
            "timings": {
                "queue_ms": round((t_admitted - t_start) * 1000, 2),
                "preprocess_ms": round(prep_s * 1000, 2),
                "generate_ms": round((t_done - t_gen) * 1000, 2),
                "total_ms": round((time.monotonic() - t_start) * 1000, 2),
            },
            "model": {"name": info.name, "revision": info.revision},
            "cached": False,
            "notice": "TINY RANDOM MODEL: output text is meaningless" if info.tiny else None,
            "format": fmt,
        }
        self.cache.put(key, response)
        return response
