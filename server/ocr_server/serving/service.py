"""The serving object: one OCR request from bytes+options to a typed response (OcrResponse), whole or streamed.

Order matters: options are validated and the cache consulted before a slot is taken; decoding,
splitting and cropping run in a thread pool (never on the event loop); pages (or the parts of a
split page) go to the batcher together, so they share generate calls; the response is assembled
and cached. /v1/ocr and /v1/chat/completions, streamed or not, all run `stream()`: `ocr()` is its
last event. Errors are OcrError subclasses (runtime/errors.py); the HTTP layer answers them (http/errors.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import AsyncGenerator, Callable, Generic, TypeVar

from ocr_limits import default_batch_max_running
from ocr_limits.request_classes import BATCH, INTERACTIVE

from ..engines.api import Generated, ModelInfo, NGramSettings, OcrEngine, PreparedPage, Runner, RunnerContext
from ..engines.crops import CropPlan
from ..engines.scheduling import BATCH_HOLD_MAX_S
from ..runtime.config import ServerConfig
from ..runtime.errors import BadInput, DeadlineExceeded, ModelLoading
from ..runtime.metrics import Metrics
from ..runtime.plugins import EngineHooks
from .admission import Admission
from .cache import ResultCache, cache_key
from .documents import load_document, parse_pages
from .events import Delta, Done, Event, Started
from .grounding import parse_output, rebase_grounding, strip_special
from .outcome import classify
from .prompts import full_prompt, prompt_from_text
from .schema import BlockOut, Layout, ModelOut, OcrOptions, OcrResponse, PageOut, PartOut, SplitOut, Usage
from .split import SplitPlan, merge_parts, plan_split

log = logging.getLogger("ocr_server.service")
PAGE_SPLIT = "\n<--- Page Split --->\n"
TINY_NOTICE = "TINY RANDOM MODEL: output text is meaningless"
P = TypeVar("P", bound=PreparedPage)
T = TypeVar("T")


def decode_base64(data: str) -> bytes:
    if data.startswith("data:"):
        data = data.split(",", 1)[-1]
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput("the 'image' field is not valid base64", param="image") from None


def preprocess_check(deadline: float, stop: threading.Event) -> Callable[[], None]:
    """The check a worker thread runs between pages: a thread cannot be cancelled, so reading a
    document stops at the next page once its request is past the deadline or gone."""

    def check() -> None:
        if stop.is_set() or time.monotonic() > deadline:
            raise DeadlineExceeded("the request deadline passed while its document was being read")

    return check


@dataclass
class PageJob(Generic[P]):
    """One page on its way through the model: the whole page's plan and the pages generated for it."""

    number: int
    plan: CropPlan  # the page as one view
    items: list[P]  # one, or one per split part
    split: SplitPlan | None = None


class OcrServing(Generic[P]):
    """The server's request path and its state: result cache, preprocessing pool, admission and
    the engine's runner; ready once the engine is loaded and warmed up."""

    def __init__(self, cfg: ServerConfig, engine: OcrEngine[P], metrics: Metrics, hooks: EngineHooks | None = None) -> None:
        self.cfg, self.engine, self.metrics = cfg, engine, metrics
        self.hooks = hooks or EngineHooks()
        self.cache: ResultCache[OcrResponse] = ResultCache(cfg.service.cache_entries, cfg.service.cache_max_bytes)
        self.pool = ThreadPoolExecutor(max_workers=cfg.runtime.preprocess_workers, thread_name_prefix="preprocess")
        self.ready = False
        self.load_error: str | None = None
        self._admission: Admission | None = None
        self._runner: Runner[P] | None = None  # the batcher, the slots runner, or vLLM's engine

    @property
    def admission(self) -> Admission:
        if self._admission is None:
            raise RuntimeError("the service is not started")
        return self._admission

    @property
    def runner(self) -> Runner[P]:
        if self._runner is None:
            raise RuntimeError("the service is not started")
        return self._runner

    @property
    def info(self) -> ModelInfo:
        """The loaded model's name, revision, device... (RuntimeError before the engine loaded)."""
        if self.engine.info is None:
            raise RuntimeError("the engine is not loaded")
        return self.engine.info

    def start(self, on_fatal: Callable[[BaseException], None]) -> None:
        """Called on the event loop once the engine is loaded; requests wait for mark_ready (after the warm-up)."""
        r = self.cfg.runtime
        runner = self.engine.runner(RunnerContext(self.metrics, on_fatal, self._interactive_inside, self.hooks))
        # A runner that decodes a fixed number of pages at once (the slots decoder) admits at least
        # that many requests: CONCURRENCY does not cap its batch.
        inside = max(r.concurrency, runner.capacity)
        self._admission = Admission(inside, r.queue_size, self.metrics, batch_threshold=r.batch_queue_threshold,
                                    batch_max_running=r.batch_max_running or default_batch_max_running(inside))
        self._runner = runner
        runner.start()

    def _interactive_inside(self) -> bool:
        """Whether an interactive request holds an admission slot (the slots runner holds batch pages back then)."""
        return self._admission is not None and self._admission.interactive_inside()

    async def on_engine_thread(self, fn: Callable[[], T]) -> T:
        """Run fn on the one thread that runs batches (the warm-up must warm that thread's state)."""
        return await self.runner.on_engine_thread(fn)

    def engine_stalled_for(self) -> float:
        """Seconds the engine has owed work without progress; 0 when idle or not started."""
        return self._runner.stalled_for() if self._runner is not None else 0.0

    def mark_ready(self) -> None:
        self.ready = True
        self.metrics.model_loaded.set(1)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # ---------- decisions ----------
    def split_mode(self, opts: OcrOptions) -> str:
        return opts.split or self.cfg.runtime.split_pages

    def plan_split(self, width: int, height: int, opts: OcrOptions) -> SplitPlan | None:
        if self.split_mode(opts) != "auto":
            return None
        r, m = self.cfg.runtime, self.cfg.model
        lo, cap = self.engine.crop_bounds(opts.max_visual_tokens)
        return plan_split(width, height, crop_size=m.input_size, base_size=m.base_size, min_crops=lo, max_crops=cap,
                          max_downscale=r.split_max_downscale, overlap=r.split_overlap, max_parts=r.split_max_parts)

    def prompt_text(self, opts: OcrOptions) -> str | None:
        """The request's own prompt, checked against the tokenizer (None: the mode's prompt)."""
        if opts.prompt is None:
            return None
        prompt = prompt_from_text(opts.prompt, "prompt", opts.prompt_mode)
        text = full_prompt(prompt.mode, prompt.text)
        self.engine.check_prompt(text, "prompt")
        return text

    def _key(self, data: bytes, opts: OcrOptions, max_new: int, ngram: NGramSettings | None, tenant: str) -> str:
        key_opts = opts.model_dump(exclude={"timeout_sec", "stream"})
        key_opts["max_new_tokens"] = max_new
        key_opts["split"] = self.split_mode(opts)
        if ngram is not None:
            key_opts["ngram"] = [ngram.size, ngram.window, sorted(ngram.whitelist)]
        return cache_key(data, key_opts, self.info.revision, tenant)

    # ---------- worker thread ----------
    def _prepare_all(self, data: bytes, selected: list[int] | None, opts: OcrOptions, max_new: int, deadline: float,
                     ngram: NGramSettings | None, prompt: str | None,
                     check: Callable[[], None]) -> tuple[str, list[PageJob[P]], float]:
        t0 = time.monotonic()
        s = self.cfg.service
        fmt, pages = load_document(data, pages=selected, max_pages=s.max_pages, pdf_dpi=s.pdf_dpi,
                                   max_pixels=s.max_image_pixels, check=check)
        jobs = []
        for page in pages:
            split = self.plan_split(page.image.width, page.image.height, opts)
            images = [page.image.crop(box) for box in split.boxes] if split else [page.image]
            items: list[P] = []
            for image in images:
                check()
                item = self.engine.prepare(image, prompt_mode=opts.prompt_mode, max_visual_tokens=opts.max_visual_tokens,
                                           max_new_tokens=max_new, prompt=prompt)
                item.deadline = deadline
                item.ngram = ngram
                item.min_new_tokens = min(opts.min_new_tokens or 0, max_new)
                items.append(item)
            plan = self.engine.plan(page.image, opts.max_visual_tokens) if split else items[0].plan
            jobs.append(PageJob(page.number, plan, items, split))
        return fmt, jobs, time.monotonic() - t0

    async def _preprocess(self, data: bytes, selected: list[int] | None, opts: OcrOptions, max_new: int, deadline: float,
                          ngram: NGramSettings | None, prompt: str | None = None) -> tuple[str, list[PageJob[P]], float]:
        """_prepare_all in the pool, within the request's deadline: past it the request answers 504 and
        gives its admission slot back at once, and the worker stops at its next page."""
        stop = threading.Event()
        work = asyncio.get_running_loop().run_in_executor(self.pool, self._prepare_all, data, selected, opts, max_new,
                                                          deadline, ngram, prompt, preprocess_check(deadline, stop))
        try:
            return await asyncio.wait_for(work, max(deadline - time.monotonic(), 0.0))
        except TimeoutError:
            raise DeadlineExceeded("the request deadline passed while its document was being read") from None
        finally:
            stop.set()  # a worker still reading (deadline, client gone) stops at its next page

    # ---------- the request ----------
    async def ocr(self, data: bytes, opts: OcrOptions, ngram: NGramSettings | None = None, *, tenant: str = "",
                  request_class: str = INTERACTIVE, use_cache: bool = True) -> OcrResponse:
        """The whole response at once."""
        async for event in self.stream(data, opts, ngram, live=False, tenant=tenant, request_class=request_class,
                                       use_cache=use_cache):
            if isinstance(event, Done):
                return event.response
        raise RuntimeError("the request ended without a result")

    async def stream(self, data: bytes, opts: OcrOptions, ngram: NGramSettings | None = None, *, live: bool = True,
                     tenant: str = "", request_class: str = INTERACTIVE,
                     use_cache: bool = True) -> AsyncGenerator[Event, None]:
        """Started, then Delta(text) as the first page is generated (live), the rest of the text, Done(response).

        The deltas joined are the response's `raw`. Only the first page streams token by token; later
        pages and split pages (their merge needs every part) arrive when generation ends.
        Errors before Started are the request's; after it they end the stream. `tenant`
        (cache.tenant_id of the API key) scopes the result cache; `request_class` (engines/scheduling.py) orders
        admission and the engine's queue. `use_cache=False` neither reads nor fills the result
        cache: the page is generated again (shadow.py's noise replay).
        """
        if not self.ready:
            raise ModelLoading("the model is still loading", retry_after=5)
        t_start = time.monotonic()
        r = self.cfg.runtime
        timeout = min(opts.timeout_sec or r.timeout_sec, r.timeout_sec)
        deadline = t_start + timeout
        max_new = min(opts.max_new_tokens or r.max_new_tokens, r.max_new_tokens)
        selected = parse_pages(opts.pages, max_pages=self.cfg.service.max_pages)  # bounded before any work
        if (opts.min_new_tokens or 0) > max_new:
            raise BadInput(f"min_new_tokens: {opts.min_new_tokens} is more than max_new_tokens ({max_new})",
                           param="min_new_tokens")
        prompt = self.prompt_text(opts)  # a bad prompt is refused before any work
        key = self._key(data, opts, max_new, ngram, tenant)
        hit = self.cache.get(key) if use_cache else None
        if hit is not None:
            self.metrics.cache_hits.inc()
            yield Started()
            if hit.raw:
                yield Delta(hit.raw)
            yield Done(hit.model_copy(update={"cached": True,
                                               "timings": {"total_ms": round((time.monotonic() - t_start) * 1000, 2)}}))
            return
        if use_cache:
            self.metrics.cache_misses.inc()

        loop = asyncio.get_running_loop()
        sent = ""
        async with self.admission.slot(deadline, request_class):
            t_admitted = time.monotonic()
            if request_class == BATCH:  # a person's request inside reads first
                await self.admission.yield_to_interactive(min(BATCH_HOLD_MAX_S, deadline - time.monotonic()))
            fmt, jobs, prep_s = await self._preprocess(data, selected, opts, max_new, deadline, ngram, prompt)
            for job in jobs:
                for it in job.items:
                    it.request_class = request_class
            yield Started()
            tokens: asyncio.Queue[int | None] = asyncio.Queue()
            decoder = None
            if live and jobs[0].split is None:
                decoder = self.engine.stream_decoder()

                def on_token(tok: int) -> None:  # on the engine thread
                    loop.call_soon_threadsafe(tokens.put_nowait, tok)

                jobs[0].items[0].on_token = on_token
            items = [it for job in jobs for it in job.items]
            t_gen = time.monotonic()
            task = asyncio.ensure_future(asyncio.gather(*(self.runner.submit(it) for it in items)))
            task.add_done_callback(lambda _: tokens.put_nowait(None))
            finished = False
            try:
                while (tok := await tokens.get()) is not None:
                    if decoder is not None and (delta := decoder.push(tok)):
                        sent += delta
                        yield Delta(delta)
                results = await task
                finished = True
            finally:
                if not finished:  # an error, the deadline, or the client went away: stop every row of it
                    for it in items:
                        it.cancelled.set()
                    task.cancel()
            t_done = time.monotonic()

        total_s = time.monotonic() - t_start
        self.metrics.preprocess.observe(prep_s)
        self.metrics.preprocess_ratio.observe(prep_s / total_s if total_s > 0 else 0.0)
        timings = {
            "queue_ms": round((t_admitted - t_start) * 1000, 2),
            "preprocess_ms": round(prep_s * 1000, 2),
            "generate_ms": round((t_done - t_gen) * 1000, 2),
            "total_ms": round(total_s * 1000, 2),
        }
        response = self._assemble(fmt, jobs, results, timings, token_ids=opts.return_token_ids)
        if use_cache:
            self.cache.put(key, response)
        raw = response.raw
        if raw.startswith(sent):
            if raw[len(sent):]:
                yield Delta(raw[len(sent):])
        else:  # cannot happen with a byte-level tokenizer; say so rather than send a wrong tail
            log.warning("streamed text is not a prefix of the final text; the stream's text may differ from raw")
        yield Done(response)

    def _assemble(self, fmt: str, jobs: list[PageJob[P]], results: list[Generated], timings: dict[str, float],
                  token_ids: bool = False) -> OcrResponse:
        pages: list[PageOut] = []
        at = 0
        for job in jobs:
            gens = results[at:at + len(job.items)]
            at += len(job.items)
            pages.append(self._page(job, gens, token_ids))
        info = self.info
        return OcrResponse(
            text=PAGE_SPLIT.join(p.text for p in pages),
            raw=PAGE_SPLIT.join(p.raw for p in pages),
            blocks=[b for p in pages for b in p.blocks],
            layout=pages[0].layout,
            pages=pages,
            usage=Usage(visual_tokens=sum(p.usage.visual_tokens for p in pages),
                        generated_tokens=sum(p.usage.generated_tokens for p in pages), pages=len(pages),
                        prompt_tokens=sum(p.usage.prompt_tokens for p in pages)),
            timings=timings,
            model=ModelOut(name=info.name, revision=info.revision),
            cached=False,
            notice=TINY_NOTICE if info.tiny else None,
            format=fmt,
        )

    def _page(self, job: PageJob[P], gens: list[Generated], token_ids: bool) -> PageOut:
        """One page of the response: a split page's parts merged, their boxes on the page."""
        width, height = job.plan.width, job.plan.height
        for item, gen in zip(job.items, gens):
            self.metrics.visual_tokens.observe(item.plan.visual_tokens)
            self.metrics.generated_tokens.observe(len(gen.token_ids))
        split_out = None
        if job.split is None:
            parsed = parse_output(gens[0].raw, width, height, page=job.number)
        else:
            self.metrics.split_parts.observe(len(job.items))
            raws = [rebase_grounding(strip_special(g.raw), box, (width, height)) for g, box in zip(gens, job.split.boxes)]
            parsed = parse_output(merge_parts(raws), width, height, page=job.number)
            split_out = SplitOut(reason=job.split.reason, overlap_px=job.split.overlap, parts=[
                PartOut(box=list(box), layout=Layout.of(it.plan), generated_tokens=len(g.token_ids), finished=g.finished)
                for box, it, g in zip(job.split.boxes, job.items, gens)])
        outcome = classify([(g.token_ids, g.finished) for g in gens], parsed.text, self.info.repeat_allowed)
        self.metrics.page_outcome(outcome)
        return PageOut(
            page=job.number, text=parsed.text, raw=parsed.raw,
            blocks=[BlockOut(label=b.label, box=b.boxes[0] if b.boxes else None, boxes=b.boxes, text=b.text, page=b.page)
                    for b in parsed.blocks],
            layout=Layout.of(job.plan),
            usage=Usage(visual_tokens=sum(it.plan.visual_tokens for it in job.items),
                        generated_tokens=sum(len(g.token_ids) for g in gens), pages=1,
                        prompt_tokens=sum(len(it.input_ids) for it in job.items)),
            finished=all(g.finished for g in gens),
            outcome=outcome,
            split=split_out,
            token_ids=[list(g.token_ids) for g in gens] if token_ids else None,
            prompt_token_ids=[list(it.input_ids) for it in job.items] if token_ids else None,
        )
