"""The model: load (both checkpoint layouts), prepare one page, generate one batch. No HTTP.

transformers' native DeepseekOcr2 classes do the real work. What this module adds, and why:
- The official upload's config is translated in memory (convert.py); transformers maps its keys.
- The processor runs per page, not per batch: its crop settings are per call, and requests in one
  batch may carry different visual-token caps. Collation (left padding) happens here.
  Workaround: with `crop_to_patches=False` the native image processor shrinks the global view to
  `tile_size` (768) while the processor still counts 256 tokens for it; so a page that must not be
  cropped (low MAX_VISUAL_TOKENS) is processed with crop_to_patches=False and tile_size=BASE_SIZE.
- Greedy decoding with the official windowed no-repeat n-gram guard (ngram 20, window 90, <td>
  and </td> whitelisted), which transformers' `no_repeat_ngram_size` (whole sequence, no window,
  no whitelist) does not reproduce. It looks only at generated tokens, so padding cannot change it.
- Per-row stopping: each row stops at its own max_new_tokens, or as soon as its request is past
  its deadline or cancelled, so no GPU time is spent on an answer nobody waits for.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from PIL import Image

from ocr_limits import MIN_CROPS, TOKEN_STRIDE, view_tokens
from ocr_limits.prompts import MAX_PROMPT_TOKENS, PROMPTS

from ...runtime.config import (
    ConfigError,
    RuntimeConfig,
    ServerConfig,
    crops_allowed,
    crops_required,
    resolve_dtype,
    validate_against_model,
)
from ..api import (
    TD_TOKENS,
    DecoderReport,
    Generated,
    GraphCapture,
    ModelInfo,
    PreparedPage,
    RunnerContext,
    StartupError,
)
from ..batcher import Batcher
from ..checkpoint import is_official_layout, read_config_json, revision, validate_model_dir
from ..crops import CropPlan, plan_crops
from ..detokenize import IncrementalDecoder
from ..prompt_check import check_tokens
from ..tiny_marker import TINY_MARKER, TINY_SERVED_NAME, is_tiny
from .convert import translate_official_config
from .min_tokens import HoldEos
from .ngram_guard import WindowedNoRepeatNGram
from .rows import RowStop, RowStreamer
from .slot_runner import SlotRunner
from .prepare_pool import PreparePool, preprocess_in_processes
from .slots import Finished, SlotDecoder

log = logging.getLogger("ocr_server.engine")

DEFAULT_GPU_SLOTS = 64  # DECODE_SLOTS on a GPU: 64 rows of the longest prompt + 8192 new tokens fit an H200 (about 37 GiB of KV)


def resolve_decoder(setting: str, device: torch.device) -> str:
    """DECODER=auto: the slots decoder on every device. On a CPU (eager, no graphs) it is faster than
    generate() too: measured with the tests' tiny model, one page alone in about 0.5-0.7 s instead of
    1.2-1.4 s and 16 concurrent pages in 4.8-6.6 s instead of 11.4-12.5 s, as pages need not wait for
    a batch to fill or for its longest page. generate() stays the reference (DECODER=generate)."""
    del device  # kept for callers: the choice no longer depends on it
    return "slots" if setting == "auto" else setting


def compile_backend(r: RuntimeConfig, device: torch.device) -> str:
    """The decode step's torch.compile backend: inductor with DECODE_COMPILE, else "" (eager). The
    compiles are paid while the warm-up captures the graphs, so it needs a GPU and CUDA_GRAPHS;
    anywhere else they would fall in the middle of serving: refused."""
    if not r.decode_compile:
        return ""
    if device.type != "cuda" or not r.cuda_graphs:
        raise StartupError(f"DECODE_COMPILE=true compiles the decode step while its CUDA graphs are captured: it needs "
                           f"a GPU and CUDA_GRAPHS=true (device {device.type}, CUDA_GRAPHS={str(r.cuda_graphs).lower()})")
    return "inductor"


@dataclass(kw_only=True)
class TensorPage(PreparedPage):
    """One page ready for the model: its views as tensors (built in a worker thread)."""

    pixel_values: torch.Tensor  # [1, 3, base, base]: normalised float, or uint8 (pinned) on a GPU (pixels.py)
    pixel_values_local: torch.Tensor | None  # [crops, 3, s, s], the same


class Engine:
    """Holds model, tokenizer and image processor; `generate_batch` is called from one thread."""

    def __init__(self, cfg: ServerConfig) -> None:
        self.cfg = cfg
        self.model: Any = None
        self.tokenizer: Any = None
        self.image_processor: Any = None
        self.info: ModelInfo | None = None
        self.max_crops = crops_allowed(cfg.model.max_visual_tokens)
        self.min_crops = crops_required(cfg.model.min_visual_tokens)
        self.decoder = "generate"
        self.slots: SlotDecoder | None = None  # with DECODER=slots
        self._inspected: tuple[Path, Any, str, bool] | None = None  # inspect(): model dir, config, layout, tiny
        # Told the rows of each decode step of generate() (the runner sets it to the batch-size metric).
        self.on_decode_step: Callable[[int], None] | None = None
        # On a GPU pages leave the worker threads as uint8 in pinned memory and are normalised on the
        # device (pixels.py); on a CPU the workers normalise, off the engine thread.
        self.uint8_pixels = False
        self.pixel_table: torch.Tensor | None = None
        self.prepare_pool: PreparePool | None = None  # PREPROCESS_MODE=processes

    # ---------- loading ----------
    def device(self) -> torch.device:
        r = self.cfg.runtime
        if r.device == "cpu" or (r.device == "auto" and not torch.cuda.is_available()):
            return torch.device("cpu")
        if not torch.cuda.is_available():
            raise ConfigError("DEVICE=cuda but no CUDA device is available")
        if r.gpu_id >= torch.cuda.device_count():
            raise ConfigError(f"GPU_ID={r.gpu_id} is not allowed: {torch.cuda.device_count()} CUDA device(s) visible (0..{torch.cuda.device_count() - 1})")
        return torch.device("cuda", r.gpu_id)

    def inspect(self) -> None:
        """Read config.json and check the configured sizes against it; no weights. Raises ConfigError."""
        from transformers import DeepseekOcr2Config
        from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2VisionModel

        cfg = self.cfg
        model_dir = validate_model_dir(cfg)
        try:
            raw = read_config_json(model_dir)
            official = is_official_layout(raw)
            config = (DeepseekOcr2Config.from_dict(translate_official_config(raw)) if official
                      else DeepseekOcr2Config.from_pretrained(str(model_dir), local_files_only=True))
        except (ValueError, TypeError, KeyError, OSError) as exc:
            raise ConfigError(f"MODEL_PATH: {model_dir}/config.json is not a DeepSeek-OCR-2 config: {exc}") from None
        # Which crop sizes can this model serve? One query embedding per token of a view:
        # size = sqrt(queries) * 16 * 4. Checked on a weightless skeleton, before loading weights.
        with torch.device("meta"):
            skeleton = DeepseekOcr2VisionModel(config.vision_config)
        query_sizes = {}
        for emb in (skeleton.query_768_resolution, skeleton.query_1024_resolution):
            side = int(math.isqrt(emb.num_embeddings))
            query_sizes[side * TOKEN_STRIDE] = emb.num_embeddings
        del skeleton
        validate_against_model(cfg, query_sizes)
        tiny = is_tiny(model_dir)
        layout = "official (deepseek-ai, translated at load)" if official else "transformers-native"
        self._inspected = (model_dir, config, layout, tiny)

    def load_preprocessing(self) -> None:
        """The tokenizer and the image processor alone: what `prepare` needs (a preprocessing worker
        process builds only these)."""
        from transformers import PreTrainedTokenizerFast

        from .global_view import image_processor

        if self._inspected is None:
            self.inspect()
        assert self._inspected is not None
        model_dir, m = self._inspected[0], self.cfg.model
        self.tokenizer = PreTrainedTokenizerFast.from_pretrained(str(model_dir), local_files_only=True)
        self.tokenizer.padding_side = "left"
        self.image_processor = image_processor(m.base_size, m.input_size)

    def load(self) -> ModelInfo:
        from transformers import DeepseekOcr2ForConditionalGeneration

        cfg = self.cfg
        if self._inspected is None:
            self.inspect()
        assert self._inspected is not None
        model_dir, config, layout, tiny = self._inspected
        if tiny:
            log.warning("%s at %s: its output text is meaningless; for tests and demos only", TINY_MARKER, model_dir)
        device = self.device()
        dtype = getattr(torch, resolve_dtype(cfg.runtime.dtype, device.type))
        self.decoder = resolve_decoder(cfg.runtime.decoder, device)
        # refused before the weights load: a pod crash-looping on it says why at once
        step_compile = compile_backend(cfg.runtime, device) if self.decoder == "slots" else ""
        if device.type == "cuda":
            # cuDNN's attention builds a plan per input shape, and every decode step is a new shape:
            # measured on an H200, a request with unseen lengths paid seconds (a 128-token answer
            # 5.7 s instead of 0.5 s). Flash / memory-efficient SDPA kernels need no per-shape build.
            torch.backends.cuda.enable_cudnn_sdp(False)
        t0 = time.monotonic()
        model, info = DeepseekOcr2ForConditionalGeneration.from_pretrained(
            str(model_dir), config=config, dtype=dtype, local_files_only=True, output_loading_info=True,
            attn_implementation="sdpa",
        )
        missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
        mismatched = info.get("mismatched_keys") or []
        log.info(
            "weights loaded from %s (%s layout): %d missing keys, %d unexpected keys, %d mismatched, %.1fs",
            model_dir, layout, len(missing), len(unexpected), len(mismatched), time.monotonic() - t0,
        )
        if missing or mismatched:
            raise StartupError(
                f"refusing to serve: the checkpoint in {model_dir} lacks {len(missing)} tensor(s) "
                f"{missing[:8]} and has {len(mismatched)} with the wrong shape {[m[0] if isinstance(m, tuple) else m for m in mismatched][:8]}"
            )
        if unexpected:
            raise StartupError(f"refusing to serve: the checkpoint in {model_dir} has {len(unexpected)} unexpected tensor(s) {unexpected[:8]}")
        model.to(device).eval()

        self.load_preprocessing()
        tokenizer = self.tokenizer
        self._check_vocabulary(tokenizer, config)
        self.model = model
        self.whitelist = {tokenizer.convert_tokens_to_ids(t) for t in TD_TOKENS}
        if device.type == "cuda":
            from .pixels import normalisation_table

            self.uint8_pixels = True
            self.pixel_table = normalisation_table(self.image_processor).to(device, dtype)
        if preprocess_in_processes(cfg.runtime.preprocess_mode):
            self.prepare_pool = PreparePool(cfg, cfg.runtime.preprocess_workers, self.uint8_pixels)
            self.prepare_pool.start()
            log.info("pages are prepared in %d worker processes", self.prepare_pool.workers)
        self.image_token_id = config.image_token_id
        name = cfg.model.name
        if tiny:
            name = TINY_SERVED_NAME
        if self.decoder == "slots":
            self.slots = self._slot_decoder(device, step_compile)
        self.info = ModelInfo(
            name=name, revision=revision(model_dir, cfg.model.revision, tiny), layout=layout, tiny=tiny,
            device=str(device), dtype=str(dtype).replace("torch.", ""), decoder=self.decoder,
            repeat_allowed=frozenset(self.whitelist),
        )
        return self.info

    def longest_prompt(self) -> int:
        """Prompt ids of the largest page the server allows with the longest prompt text a request may send."""
        m = self.cfg.model
        image = "<image>" * (view_tokens(m.base_size) + self.max_crops * view_tokens(m.input_size) + 1)
        fixed = max(len(self.tokenizer(p.replace("<image>", image, 1))["input_ids"]) for p in PROMPTS.values())
        return max(fixed, len(self.tokenizer(image)["input_ids"]) + MAX_PROMPT_TOKENS)

    def _slot_decoder(self, device: torch.device, step_compile: str = "") -> SlotDecoder:
        """The slot KV cache for DECODE_SLOTS rows of the longest prompt + MAX_NEW_TOKENS; refused
        when it does not fit the GPU's free memory."""
        from .slots import SlotPlan, buckets, head_dim, kv_bytes_per_slot, parse_buckets

        r = self.cfg.runtime
        text = self.model.config.text_config
        max_len = self.longest_prompt() + r.max_new_tokens
        slots = r.decode_slots or (DEFAULT_GPU_SLOTS if device.type == "cuda" else r.batch_size)
        kv_buckets = (parse_buckets(r.decode_kv_buckets, max_len, "DECODE_KV_BUCKETS") if r.decode_kv_buckets
                      else buckets(max_len, first=512))
        # Views per vision forward: 8 on a GPU (batched kernels); 2 on a CPU, where a bigger batch is no
        # faster and each layer of the forward is a chunk the decoding rows wait for (slot_runner.py)
        plan = SlotPlan(slots=slots, max_len=max_len, slot_buckets=buckets(slots, first=1), kv_buckets=kv_buckets,
                        guard_capacity=max(1, r.max_new_tokens), experts=r.experts, graphs=r.cuda_graphs,
                        vision_views=8 if device.type == "cuda" else 2, compile=step_compile)
        per_slot = kv_bytes_per_slot(text.num_hidden_layers, text.num_key_value_heads, head_dim(text), max_len, self.model.dtype)
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            if slots * per_slot > 0.85 * free:
                raise StartupError(
                    f"DECODE_SLOTS={slots}: the slot KV cache needs {slots * per_slot / 2**30:.1f} GiB "
                    f"({per_slot / 2**20:.0f} MiB per slot of {max_len} tokens) but the GPU has {free / 2**30:.1f} GiB free; "
                    f"lower DECODE_SLOTS or MAX_NEW_TOKENS")
        decoder = SlotDecoder(self.model, plan, eos=self.tokenizer.eos_token_id, pad=self.tokenizer.pad_token_id,
                              pixels=self._on_device, ngram_for=self.ngram_settings)
        log.info("slots decoder: %d slots of %d tokens, %.1f MiB of KV per slot, KV buckets %s, experts %s, "
                 "attention %s, CUDA graphs %s, compiled step %s", slots, max_len, per_slot / 2**20, list(kv_buckets),
                 decoder.experts_name, decoder.attention, r.cuda_graphs and device.type == "cuda", decoder.compiled)
        return decoder

    def decoder_report(self) -> DecoderReport:
        """What /health says about the decoder: which one, and for slots its size and graph capture time."""
        if self.slots is None:
            return DecoderReport(self.decoder)
        s = self.slots
        return DecoderReport("slots", slots=s.plan.slots, kv_max_len=s.plan.max_len, kv_bytes_per_slot=s.kv_bytes_per_slot(),
                             kv_buckets=s.plan.kv_buckets, cuda_graphs=len(s.graphs),
                             graph_capture_seconds=round(s.capture_seconds, 3),
                             decode_step="compiled" if s.compiled else "eager", attention=s.attention)

    def capture_graphs(self) -> GraphCapture | None:
        """The slots decoder's step graphs, one per step shape (slot bucket x KV length x guard on or
        off), on a GPU with CUDA_GRAPHS; counted after the capture, which may fall back from flex
        attention (one KV length) to buckets."""
        s = self.slots
        if s is None or not s.plan.graphs or not s.gpu:
            return None
        seconds = s.capture()
        return GraphCapture(len(s.graphs), seconds)

    def runner(self, ctx: RunnerContext) -> SlotRunner | Batcher[TensorPage]:
        """DECODER=slots: pages join between decode steps (slot_runner.py); generate: the dynamic batcher."""
        if self.slots is not None:
            return SlotRunner(self, metrics=ctx.metrics, on_fatal=ctx.on_fatal, hooks=ctx.hooks,
                              interactive_inside=ctx.interactive_inside)
        self.on_decode_step = ctx.metrics.batch_size.observe  # generate() reports the rows of each decode step
        r = self.cfg.runtime
        return Batcher(self.generate_batch, batch_size=r.batch_size, wait_s=r.batch_wait_ms / 1000,
                       metrics=ctx.metrics, on_fatal=ctx.on_fatal, hooks=ctx.hooks)

    def check_prompt(self, text: str, param: str) -> int:
        return check_tokens(self.tokenizer, text, param)

    @staticmethod
    def _check_vocabulary(tokenizer: Any, config: Any) -> None:
        """A tokenizer that does not fit the embedding gives garbage or repeats: refuse it."""
        vocab = config.text_config.vocab_size
        if len(tokenizer) > vocab:
            raise StartupError(f"refusing to serve: the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {vocab}")
        image_id = tokenizer.convert_tokens_to_ids("<image>")
        if image_id != config.image_token_id:
            raise StartupError(f"refusing to serve: tokenizer maps <image> to {image_id}, the config expects {config.image_token_id}")
        for tok in ("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>", "<|grounding|>", *TD_TOKENS):
            tid = tokenizer.convert_tokens_to_ids(tok)
            if tid is None or tid == tokenizer.unk_token_id or not 0 <= tid < vocab:
                raise StartupError(f"refusing to serve: special token {tok} is missing from the tokenizer")
        eos = config.text_config.eos_token_id
        if tokenizer.eos_token_id != eos:
            raise StartupError(f"refusing to serve: tokenizer EOS id {tokenizer.eos_token_id} != config eos_token_id {eos}")
        log.info("tokenizer checked: %d tokens <= vocab_size %d, <image>=%d", len(tokenizer), vocab, image_id)

    # ---------- one page ----------
    def crop_bounds(self, max_visual_tokens: int | None) -> tuple[int, int]:
        """(min, max) crop count for a request: server caps, narrowed by the request's cap."""
        cap = self.max_crops if max_visual_tokens is None else min(self.max_crops, crops_allowed(max_visual_tokens))
        lo = max(MIN_CROPS, min(self.min_crops, cap)) if cap else 0
        return lo, cap

    def plan(self, image: Image.Image, max_visual_tokens: int | None = None) -> CropPlan:
        lo, cap = self.crop_bounds(max_visual_tokens)
        m = self.cfg.model
        return plan_crops(image.width, image.height, crop_size=m.input_size, base_size=m.base_size, min_crops=lo, max_crops=cap)

    def prepare(self, image: Image.Image, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int,
                prompt: str | None = None) -> TensorPage:
        """Crop and normalise one page and build its prompt ids (the mode's prompt, or `prompt`, checked by
        engines/prompt_check.py, with one <image>). CPU only; runs in a worker thread, and the work
        itself in a worker process with PREPROCESS_MODE=processes (prepare_pool.py)."""
        kwargs = {"prompt_mode": prompt_mode, "max_visual_tokens": max_visual_tokens, "prompt": prompt}
        here = lambda: self.prepare_arrays(image, **kwargs)  # noqa: E731
        ids, pixels, local, plan = here() if self.prepare_pool is None else self.prepare_pool.run(image, here, **kwargs)
        return TensorPage(
            input_ids=ids,
            pixel_values=self._pinned(pixels),
            pixel_values_local=self._pinned(local) if local is not None else None,
            plan=plan,
            max_new_tokens=max_new_tokens,
        )

    def prepare_arrays(self, image: Image.Image, *, prompt_mode: str, max_visual_tokens: int | None,
                       prompt: str | None = None) -> tuple[list[int], torch.Tensor, torch.Tensor | None, CropPlan]:
        """The page's prompt ids, views and crop plan (the work of `prepare`, wherever it runs)."""
        plan = self.plan(image, max_visual_tokens)
        m = self.cfg.model
        raw = {"do_rescale": False, "do_normalize": False} if self.uint8_pixels else {}
        if plan.crops:
            lo, cap = self.crop_bounds(max_visual_tokens)
            out = self.image_processor(image, crop_to_patches=True, min_patches=lo, max_patches=cap,
                                       tile_size=m.input_size, return_tensors="pt", **raw)
        else:
            out = self.image_processor(image, crop_to_patches=False, tile_size=m.base_size, return_tensors="pt", **raw)
        got = int(out["num_local_patches"][0])
        if got != plan.crops:  # our plan and transformers' processor must agree, or token counts lie
            raise RuntimeError(f"crop plan {plan.crops} != processor crops {got} for {image.size}")
        n_image_tokens = plan.visual_tokens + 1  # + view separator
        text = (PROMPTS[prompt_mode] if prompt is None else prompt).replace("<image>", "<image>" * n_image_tokens, 1)
        ids = self.tokenizer(text)["input_ids"]
        local = out.get("pixel_values_local") if plan.crops else None
        return ids, out["pixel_values"], local, plan

    def stream_decoder(self) -> IncrementalDecoder:
        """Turns one row's streamed tokens into text deltas that add up to its `raw` (special tokens dropped)."""
        t = self.tokenizer
        skip = frozenset(i for i in (t.bos_token_id, t.eos_token_id, t.pad_token_id) if i is not None)
        return IncrementalDecoder(lambda ids: t.decode(ids, skip_special_tokens=False), skip)

    def _pinned(self, pixels: torch.Tensor) -> torch.Tensor:
        """uint8 pages in page-locked memory: their copy to the GPU is a DMA that does not wait for the host."""
        return pixels.pin_memory() if self.uint8_pixels and self.model.device.type == "cuda" else pixels

    def _on_device(self, pixels: torch.Tensor) -> torch.Tensor:
        """One page's views on the model's device in its dtype, normalised there when they are uint8."""
        if pixels.dtype != torch.uint8:
            return pixels.to(self.model.device, self.model.dtype)
        from .pixels import normalise

        return normalise(pixels.to(self.model.device, non_blocking=True), self.pixel_table)

    # ---------- one batch ----------
    def collate(self, items: list[TensorPage]) -> dict[str, Any]:
        """Left-pad prompts (generation appends on the right) and stack the views."""
        pad = self.tokenizer.pad_token_id
        width = max(len(it.input_ids) for it in items)
        ids = torch.full((len(items), width), pad, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, it in enumerate(items):
            ids[row, width - len(it.input_ids):] = torch.tensor(it.input_ids)
            mask[row, width - len(it.input_ids):] = 1
        locals_ = [self._on_device(it.pixel_values_local) for it in items if it.pixel_values_local is not None]
        dev = self.model.device
        return {
            "input_ids": ids.to(dev),
            "attention_mask": mask.to(dev),
            "pixel_values": torch.cat([self._on_device(it.pixel_values) for it in items]),  # per page: pinned copies
            "pixel_values_local": torch.cat(locals_) if locals_ else None,
            "num_local_patches": [it.plan.crops for it in items],
        }

    def ngram_settings(self, item: TensorPage) -> tuple[int, int, set[int]]:
        """(n, window, whitelist) of one row: the server's, or the request's own (vllm_xargs)."""
        r = self.cfg.runtime
        if item.ngram is None:
            return r.ngram_size, r.ngram_window, set(self.whitelist)
        return item.ngram.size, item.ngram.window, self.whitelist | set(item.ngram.whitelist)

    def ngram_guard(self, prompt_len: int, items: list[TensorPage]) -> WindowedNoRepeatNGram:
        """One guard for the batch; rows with their own settings (vllm_xargs) get them."""
        r = self.cfg.runtime
        if all(it.ngram is None for it in items):
            return WindowedNoRepeatNGram(prompt_len, r.ngram_size, r.ngram_window, self.whitelist)
        rows = [(r.ngram_size, r.ngram_window, self.whitelist) if it.ngram is None
                else (it.ngram.size, it.ngram.window, self.whitelist | set(it.ngram.whitelist)) for it in items]
        return WindowedNoRepeatNGram(prompt_len, r.ngram_size, r.ngram_window, self.whitelist, rows=rows)

    def generate_batch(self, items: list[TensorPage]) -> list[Generated]:
        """The items to their ends with the configured decoder (warm-up, benches; the server's
        slots runner prefills the waiting pages together, in chunks between decode steps)."""
        if self.slots is not None:
            return [self.generated(f) for f in self.slots.run(items)]
        return self.generate_reference(items)

    def generated(self, f: Finished) -> Generated:
        """A slots row's end (slots.Finished) as the result generate_reference gives."""
        return Generated(f.token_ids, self.tokenizer.decode(f.token_ids, skip_special_tokens=False), f.finished, f.stopped_early)

    @torch.inference_mode()
    def generate_reference(self, items: list[TensorPage]) -> list[Generated]:
        """One static batch through transformers' generate(): DECODER=generate, and the reference
        the slots decoder is tested against."""
        from transformers import LogitsProcessorList, StoppingCriteriaList

        inputs = self.collate(items)
        prompt_len = inputs["input_ids"].shape[1]
        stop = RowStop(prompt_len, items, on_step=self.on_decode_step)
        eos, pad = self.tokenizer.eos_token_id, self.tokenizer.pad_token_id
        streaming = any(it.on_token is not None for it in items)
        out = self.model.generate(
            **inputs,
            max_new_tokens=max(it.max_new_tokens for it in items),
            do_sample=False,
            num_beams=1,
            logits_processor=LogitsProcessorList([self.ngram_guard(prompt_len, items),
                                                  HoldEos(prompt_len, [it.min_new_tokens for it in items], eos)]),
            stopping_criteria=StoppingCriteriaList([stop]),
            pad_token_id=pad,
            eos_token_id=eos,
            streamer=RowStreamer(items, eos, pad) if streaming else None,
        )
        results = []
        for row, it in enumerate(items):
            toks = out[row, prompt_len:].tolist()[: it.max_new_tokens]
            finished = False
            if eos in toks:
                toks = toks[: toks.index(eos)]
                finished = True
            while toks and toks[-1] == pad and not finished:
                toks.pop()
            raw = self.tokenizer.decode(toks, skip_special_tokens=False)
            results.append(Generated(toks, raw, finished, stop.early[row]))
        return results
