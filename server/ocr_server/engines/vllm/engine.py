"""ENGINE=vllm: vLLM's async engine in the server process, behind the same service as transformers.

Why in-process: vLLM's `AsyncLLM` schedules pages itself (continuous batching: a page joins the
running batch at the next step and leaves at its EOS, no waiting for the longest page), so the
server hands each prepared page straight to it; no second HTTP hop, no dynamic batcher in front.
What stays shared with the transformers engine: the page (decoded, upright RGB, by serving/images.py /
serving/documents.py), the prompt text (ocr_limits.prompts), the crop plan's data type and the response. What
vLLM does itself: crop, normalise and expand `<image>` (its DeepSeek-OCR 2 processor, whose grid
rule this module reads for the reported layout), and the official n-gram guard
(`NGramPerReqLogitsProcessor`, given the same ngram_size / window_size / whitelist as the
transformers engine's guard).

The settings mean what they mean with the transformers engine: CONCURRENCY is the number of
requests admitted at once (service.Admission); BATCH_SIZE, the pages decoded together, is vLLM's
`max_num_seqs`. Deadlines and client disconnects cancel the request's generator, which aborts it in
vLLM (its `generate` aborts on cancellation), so no step is spent on an answer nobody waits for.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypeVar

from PIL import Image

from ocr_limits import CROP_TOKENS, MAX_CROPS, MIN_CROPS, TOKEN_CEILING, VLLM
from ocr_limits.prompts import MAX_PROMPT_TOKENS, PROMPTS

from ...runtime.config import ConfigError, ServerConfig, resolve_dtype
from ...runtime.errors import BadInput, DeadlineExceeded, EngineFailure
from ...runtime.metrics import Metrics
from ..api import TD_TOKENS, DecoderReport, Generated, GraphCapture, ModelInfo, PreparedPage, RunnerContext, StartupError
from ..checkpoint import is_official_layout, read_config_json, revision, validate_model_dir
from ..crops import CropPlan
from ..detokenize import IncrementalDecoder
from ..prompt_check import check_tokens
from ..tiny_marker import TINY_MARKER, TINY_SERVED_NAME, is_tiny

log = logging.getLogger("ocr_server.vllm_engine")
NGRAM_PROCESSOR = "vllm.model_executor.models.deepseek_ocr:NGramPerReqLogitsProcessor"
T = TypeVar("T")
VLLM_CROP_SIZE, VLLM_BASE_SIZE = VLLM.fixed_sizes  # 768, 1024: fixed in vLLM's DeepSeek-OCR 2 processor


@dataclass(kw_only=True)
class VllmPage(PreparedPage):
    """One page for vLLM: the page itself and its prompt text (vLLM crops and expands <image>);
    input_ids are vLLM's prompt ids, filled in after generation."""

    image: Image.Image
    prompt: str


def vllm_grid(width: int, height: int) -> tuple[int, int]:
    """(cols, rows) as vLLM's processor chooses them: no crops up to one crop size, else 2..6."""
    from vllm.transformers_utils.processors.deepseek_ocr import count_tiles

    if width <= VLLM_CROP_SIZE and height <= VLLM_CROP_SIZE:
        return 0, 0
    cols, rows = count_tiles(width, height, min_num=MIN_CROPS, max_num=MAX_CROPS, image_size=VLLM_CROP_SIZE)
    return (cols, rows) if cols * rows > 1 else (0, 0)


class VllmRunner:
    """The service's runner for vLLM: submit one page, get its Generated; vLLM batches them."""

    capacity = 0  # vLLM schedules its own batch (max_num_seqs); CONCURRENCY caps admission

    def __init__(self, engine: VllmEngine, metrics: Metrics, on_fatal: Callable[[BaseException], None]) -> None:
        self.engine, self.metrics, self.on_fatal = engine, metrics, on_fatal
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vllm-sync")

    async def on_engine_thread(self, fn: Callable[[], T]) -> T:
        """The warm-up's synchronous generations wait on a worker thread while the event loop serves vLLM."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def stalled_for(self) -> float:
        """vLLM keeps no progress clock here: a dead engine core exits the process instead."""
        return 0.0

    def start(self) -> None:
        self.engine.loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.engine.shutdown()

    async def submit(self, item: VllmPage) -> Generated:
        remaining = item.deadline - time.monotonic()
        if item.cancelled.is_set() or remaining <= 0:
            self.metrics.dropped.inc()
            raise DeadlineExceeded("the request deadline passed before generation")
        try:
            return await asyncio.wait_for(self.engine.generate(item), remaining)
        except TimeoutError:
            item.cancelled.set()
            raise DeadlineExceeded("the request deadline passed during generation") from None
        except (asyncio.CancelledError, DeadlineExceeded, BadInput):
            raise
        except Exception as exc:  # noqa: BLE001 - a dead engine core fails the process, as the batcher does
            log.exception("vLLM generation failed; the engine is considered dead")
            self.on_fatal(exc)
            raise EngineFailure("the model failed while generating; the server restarts") from exc


class VllmEngine:
    """vLLM's AsyncLLM with the same page/prompt/guard contract as engine.Engine."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.llm: Any = None
        self.tokenizer: Any = None
        self.info: ModelInfo | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._ids = itertools.count()
        self._inspected: tuple[Path, bool] | None = None  # inspect(): model dir, tiny

    # ---------- loading ----------
    def inspect(self) -> None:
        """config.json must be the official layout (the one vLLM's model class reads)."""
        model_dir = validate_model_dir(self.cfg)
        try:
            raw = read_config_json(model_dir)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"MODEL_PATH: {model_dir}/config.json is not readable: {exc}") from None
        if not is_official_layout(raw):
            raise ConfigError(f"MODEL_PATH: ENGINE=vllm reads the official deepseek-ai layout (DeepseekOCR2ForCausalLM); "
                              f"{model_dir} is transformers-native. Serve it with ENGINE=transformers, or use the original upload")
        self._inspected = (model_dir, is_tiny(model_dir))

    def device(self) -> str:
        r = self.cfg.runtime
        if r.device == "cpu":
            return "cpu"
        import torch

        if torch.cuda.is_available():
            return "cuda"
        if r.device == "cuda":
            raise ConfigError("DEVICE=cuda but no CUDA device is available")
        return "cpu"

    def load(self) -> ModelInfo:
        from transformers import PreTrainedTokenizerFast
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        if self._inspected is None:
            self.inspect()
        assert self._inspected is not None
        model_dir, tiny = self._inspected
        if tiny:
            log.warning("%s at %s: its output text is meaningless; for tests and demos only", TINY_MARKER, model_dir)
        r = self.cfg.runtime
        device = self.device()
        if device == "cpu":
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB for the KV cache
            os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        else:
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(r.gpu_id))
        dtype = resolve_dtype(r.dtype, device)  # DTYPE, resolved as the transformers engine resolves it
        args = AsyncEngineArgs(
            model=str(model_dir),
            tokenizer=str(model_dir),
            dtype=dtype,
            seed=0,
            max_num_seqs=r.batch_size,
            # the page's tokens, the longest prompt text (+ BOS and the newline after the image), the answer
            max_model_len=min(8192, TOKEN_CEILING + 1 + MAX_PROMPT_TOKENS + 2 + r.max_new_tokens),
            limit_mm_per_prompt={"image": 1},
            logits_processors=[NGRAM_PROCESSOR],
            # Each page is new: caching its encoder output or prefix buys nothing and would hide
            # the real cost of a repeated page (the server's result cache already answers those).
            enable_prefix_caching=False,
            mm_processor_cache_gb=0,
            enforce_eager=device == "cpu",
            # A CPU's KV cache is a fixed size (VLLM_CPU_KVCACHE_SPACE): profiling the vision tower's
            # peak memory on a dummy 6-crop page buys nothing there and costs a minute on 2 cores.
            skip_mm_profiling=device == "cpu",
            disable_log_stats=True,
        )
        t0 = time.monotonic()
        try:
            self.llm = AsyncLLM.from_engine_args(args)
        except Exception as exc:  # noqa: BLE001 - vLLM raises many kinds on a bad checkpoint
            raise StartupError(f"refusing to serve: vLLM could not load {model_dir}: {exc}") from exc
        log.info("vLLM engine loaded from %s on %s (%s) in %.1fs, max_num_seqs %d", model_dir, device, dtype,
                 time.monotonic() - t0, r.batch_size)
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
        self.whitelist = sorted(self.tokenizer.convert_tokens_to_ids(t) for t in TD_TOKENS)
        name = self.cfg.model.name
        if tiny:
            name = TINY_SERVED_NAME
        # "cuda:GPU_ID": the GPU metrics read that (physical) device, as for the transformers engine.
        shown = device if device == "cpu" else f"cuda:{r.gpu_id}"
        self.info = ModelInfo(name=name, revision=revision(model_dir, self.cfg.model.revision, tiny),
                              layout="official (read by vLLM)", tiny=tiny, device=shown, dtype=dtype,
                              repeat_allowed=frozenset(self.whitelist))
        return self.info

    def shutdown(self) -> None:
        if self.llm is not None:
            self.llm.shutdown()
            self.llm = None

    def runner(self, ctx: RunnerContext) -> VllmRunner:
        """vLLM schedules pages itself; plugins' engine hooks and the interactive hold do not apply."""
        return VllmRunner(self, ctx.metrics, ctx.on_fatal)

    def decoder_report(self) -> DecoderReport | None:
        return None

    def capture_graphs(self) -> GraphCapture | None:
        return None  # vLLM captures its own graphs when it loads

    def check_prompt(self, text: str, param: str) -> int:
        return check_tokens(self.tokenizer, text, param)

    # ---------- one page ----------
    def crop_bounds(self, max_visual_tokens: int | None) -> tuple[int, int]:
        """vLLM always allows 2..6 crops; a request asking for a lower cap is refused in plan()."""
        return MIN_CROPS, MAX_CROPS

    def plan(self, image: Image.Image, max_visual_tokens: int | None = None) -> CropPlan:
        cols, rows = vllm_grid(image.width, image.height)
        plan = CropPlan(image.width, image.height, VLLM_BASE_SIZE, VLLM_CROP_SIZE, cols, rows)
        if max_visual_tokens is not None and plan.visual_tokens > max_visual_tokens:
            raise BadInput(
                f"max_visual_tokens={max_visual_tokens} cannot be applied by ENGINE=vllm: vLLM's processor shows this "
                f"{image.width}x{image.height} page with {plan.crops} crops ({plan.visual_tokens} tokens; "
                f"{CROP_TOKENS} per crop, {MIN_CROPS}..{MAX_CROPS} crops, fixed in vLLM); send a smaller page or leave "
                "max_visual_tokens out",
                param="max_visual_tokens")
        return plan

    def prepare(self, image: Image.Image, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int,
                prompt: str | None = None) -> VllmPage:
        """`prompt`: the request's own (check_prompt checked it), else the mode's."""
        return VllmPage(image=image, prompt=PROMPTS[prompt_mode] if prompt is None else prompt,
                            plan=self.plan(image, max_visual_tokens), max_new_tokens=max_new_tokens)

    def stream_decoder(self) -> IncrementalDecoder:
        t = self.tokenizer
        skip = frozenset(i for i in (t.bos_token_id, t.eos_token_id, t.pad_token_id) if i is not None)
        return IncrementalDecoder(lambda ids: t.decode(ids, skip_special_tokens=False), skip)

    def _sampling(self, item: VllmPage) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        r = self.cfg.runtime
        size, window = (r.ngram_size, r.ngram_window) if item.ngram is None else (item.ngram.size, item.ngram.window)
        whitelist = set(self.whitelist) | (set(item.ngram.whitelist) if item.ngram is not None else set())
        extra = {"ngram_size": size, "window_size": window, "whitelist_token_ids": sorted(whitelist)} if size > 0 else None
        return SamplingParams(temperature=0.0, max_tokens=item.max_new_tokens, min_tokens=item.min_new_tokens,
                              skip_special_tokens=False,
                              extra_args=extra, output_kind=RequestOutputKind.DELTA, detokenize=False)

    async def generate(self, item: VllmPage) -> Generated:
        """One page through vLLM; cancelling this coroutine aborts the request in vLLM."""
        request_id = f"ocr-{next(self._ids)}"
        prompt = {"prompt": item.prompt, "multi_modal_data": {"image": item.image}}
        toks: list[int] = []
        finish = None
        eos = self.tokenizer.eos_token_id
        try:
            async for out in self.llm.generate(prompt, self._sampling(item), request_id):
                if out.prompt_token_ids is not None and not item.input_ids:
                    item.input_ids = list(out.prompt_token_ids)
                completion = out.outputs[0]
                for tok in completion.token_ids:
                    if tok == eos:
                        continue
                    toks.append(tok)
                    if item.on_token is not None:
                        item.on_token(tok)
                if completion.finish_reason is not None:
                    finish = completion.finish_reason
                if item.cancelled.is_set():
                    await self.llm.abort(request_id)
                    return Generated(toks, self.tokenizer.decode(toks, skip_special_tokens=False), False, True)
        except asyncio.CancelledError:
            # vLLM's generate() aborts the request when its consumer is cancelled (deadline, client gone).
            log.info("request %s aborted in vLLM after %d tokens (deadline passed or client gone)", request_id, len(toks))
            raise
        n_image = item.input_ids.count(self.tokenizer.convert_tokens_to_ids("<image>"))
        if item.input_ids and n_image != item.plan.visual_tokens + 1:
            raise RuntimeError(f"vLLM built {n_image} image tokens, the crop plan says {item.plan.visual_tokens + 1}")
        return Generated(toks, self.tokenizer.decode(toks, skip_special_tokens=False), finish == "stop", False)

    def generate_batch(self, items: list[VllmPage]) -> list[Generated]:
        """Synchronous, for the warm-up (runs on a worker thread while the event loop serves vLLM)."""
        if self.loop is None:
            raise RuntimeError("the vLLM runner is not started")

        async def many() -> list[Generated]:
            return list(await asyncio.gather(*(self.generate(it) for it in items)))

        return asyncio.run_coroutine_threadsafe(many(), self.loop).result()
