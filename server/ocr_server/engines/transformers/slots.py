"""The slots decoder: a slot KV cache, one decode step over slots, rows joining and leaving between steps.

Why: generate() decodes a static batch (new pages wait for the longest page), launches many small
kernels per step from Python and waits for the GPU several times per step. Here:
- waiting pages are prefilled together, up to `prefill_pages` at once (prefill.py: one vision pass
  and one language-model pass, keys and values written straight into per-layer slot buffers
  [slots, kv_heads, max_len, head_dim]); the prefill is a generator of chunks, so decode steps can
  run between them (slot_runner.py) and the rows already decoding keep streaming;
- one step function (step.py) decodes every slot of a slot bucket at once: embed, language model,
  output head, n-gram guard (only while a live row uses it), argmax, EOS and per-row budget
  bookkeeping. No host sync inside: on a GPU it is captured as one CUDA graph per shape and replayed;
- positions are each row's own (0..prompt-1, then one more per token), the positions generate()
  gives the row alone, so the tokens are the same;
- the host learns tokens, a prefill's first tokens as each step's, from a copy to pinned memory
  read one step behind on a GPU (the next step is already queued): the join path reads nothing
  back itself. A finished, cancelled or expired row's slot is freed at once.

The step writes only device state; the host mirrors lengths (an upper bound) to pick buckets.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch

from . import prefill as prefill_pass
from . import sam_attention, sam_positions
from .experts import choose as choose_experts
from .experts import choose_prefill, experts_function, hardware, moe_forward
from .ngram_guard import TensorNGramGuard
from .step import choose_attention, compiled_step, decode_step

if TYPE_CHECKING:
    from .engine import TensorPage

log = logging.getLogger("ocr_server.slots")
STEP_TIMES_KEPT = 1024  # host time of the last steps per slot bucket (benches); older ones are dropped
READBACK_BUFFERS = 4  # pinned host buffers the steps' tokens are copied into, in turn


# ---------- sizing: pure decisions ----------

def buckets(top: int, first: int) -> tuple[int, ...]:
    """Powers of two from `first` (or below, when `top` is smaller), ending exactly at `top`."""
    out, b = [], 1
    while b < first:
        b *= 2
    while b < top:
        out.append(b)
        b *= 2
    out.append(top)
    return tuple(out)


def parse_buckets(text: str, top: int, key: str) -> tuple[int, ...]:
    """A comma-separated list of sizes, as configured; `top` is always the last bucket."""
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError(f"{key}={text!r} is not a comma-separated list of integers") from None
    if not sizes or sizes[0] < 1:
        raise ValueError(f"{key}={text!r}: sizes must be positive integers")
    return tuple(s for s in sizes if s < top) + (top,)


def pick(sizes: tuple[int, ...], need: int) -> int:
    """The smallest bucket that holds `need`."""
    for size in sizes:
        if size >= need:
            return size
    raise ValueError(f"{need} exceeds the largest bucket {sizes[-1]}")


def head_dim(text_config: Any) -> int:
    """The attention head size: the config's head_dim when it has one, else hidden size / heads."""
    return getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads


def kv_bytes_per_slot(layers: int, kv_heads: int, head_dim: int, max_len: int, dtype: torch.dtype) -> int:
    """Keys and values of one slot across all layers."""
    return 2 * layers * kv_heads * head_dim * max_len * torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class SlotPlan:
    slots: int
    max_len: int  # longest prompt + MAX_NEW_TOKENS
    slot_buckets: tuple[int, ...]
    kv_buckets: tuple[int, ...]
    guard_capacity: int  # shifts the n-gram guard can see: the most tokens a row generates
    experts: str  # auto | grouped_mm | batched_mm | eager
    graphs: bool  # capture CUDA graphs (GPU only)
    prefill_pages: int = 8  # waiting pages prefilled together
    vision_views: int = 8  # views per vision forward (bounds SAM's attention biases: ~0.4 GB per 1024 view in bf16)
    attention: str = "auto"  # auto | bucket | flex (step.py)
    compile: str = ""  # torch.compile backend of the decode step (DECODE_COMPILE: inductor); "": eager


# ---------- host-side row bookkeeping ----------

@dataclass
class _Row:
    item: TensorPage
    slot: int
    next_pos: int  # position of the token the next step feeds (an upper bound once the device stops it)
    guarded: bool  # the n-gram guard is on for this row
    tokens: list[int] = field(default_factory=list)
    count: int = 0  # tokens generated, EOS included
    held: int = 0  # pad tokens not yet known to be non-trailing
    closed: bool = False


@dataclass
class Finished:
    item: TensorPage
    token_ids: list[int]
    finished: bool  # ended with EOS
    stopped_early: bool  # deadline or cancellation


class SlotDecoder:
    """Owns the slot KV cache and the step; every method runs on the one engine thread."""

    def __init__(self, model: Any, plan: SlotPlan, *, eos: int, pad: int,
                 pixels: Callable[[torch.Tensor], torch.Tensor],
                 ngram_for: Callable[[TensorPage], tuple[int, int, set[int]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model, self.plan, self.eos, self.pad = model, plan, eos, pad
        self.pixels, self.ngram_for, self.clock = pixels, ngram_for, clock
        text = model.config.text_config
        lm = model.model.language_model
        self.lm, self.layers, self.head = lm, list(lm.layers), model.lm_head
        # Which layers route to experts (the others are dense: the config's first_k_dense_replace).
        from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2TextMoe

        self.moe = [isinstance(block.mlp, DeepseekOcr2TextMoe) for block in self.layers]
        self.moe_forward = moe_forward
        self.device, self.dtype = model.device, model.dtype
        self.image_token = model.config.image_token_id
        self.heads = text.num_attention_heads
        self.kv_heads = text.num_key_value_heads
        self.head_dim = head_dim(text)
        self.vocab = text.vocab_size
        s, n, dev = plan.slots, plan.max_len, self.device
        shape = (s, self.kv_heads, n, self.head_dim)
        self.keys = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in self.layers]
        self.values = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in self.layers]
        self.tok = torch.zeros(s, dtype=torch.long, device=dev)  # the token the next step feeds
        self.pos = torch.zeros(s, dtype=torch.long, device=dev)  # its position = the slot's KV length
        self.live = torch.zeros(s, dtype=torch.bool, device=dev)
        self.count = torch.zeros(s, dtype=torch.long, device=dev)
        self.budget = torch.ones(s, dtype=torch.long, device=dev)
        self.min_new = torch.zeros(s, dtype=torch.long, device=dev)
        self.out_tok = torch.zeros(s, dtype=torch.long, device=dev)
        self.guard = TensorNGramGuard(s, plan.guard_capacity, self.vocab, dev)
        self.slot_index = torch.arange(s, device=dev)
        self.key_index = torch.arange(n, device=dev)
        self.gpu = dev.type == "cuda"
        hw = hardware(dev, self.dtype)
        self.experts_name = choose_experts(plan.experts, hw, plan.graphs and self.gpu)
        self.experts = {b: experts_function(self.experts_name) for b in plan.slot_buckets}
        self.prefill_experts = experts_function(choose_prefill(plan.experts, hw))
        self.attention = choose_attention(plan.attention, dev.type, compiled=self.gpu)
        self.flex = self._flex_function() if self.attention == "flex" else None
        self.graphs: dict[tuple[int, int, bool], Any] = {}
        self.use_step(plan.compile)
        self.upload = prefill_pass.Uploader(dev)
        sam_positions.install(model)
        sam_attention.install(model)  # the relative-position bias folded into SDPA (GPU) or written once (CPU)
        self.capture_seconds = 0.0
        self._host = [torch.zeros(s, dtype=torch.long, pin_memory=self.gpu) for _ in range(READBACK_BUFFERS)]
        self._next_host = 0
        self._free = list(range(s))
        heapq.heapify(self._free)
        self._filling: set[int] = set()  # slots of a prefill in progress
        self.rows: dict[int, _Row] = {}
        self._pending: deque[tuple[list[tuple[int, _Row]], torch.Tensor, Any]] = deque()
        self.lag = 1 if self.gpu else 0  # steps the host reads behind the device
        # rows -> host seconds of the last steps (benches); bounded, the server runs for months
        self.step_seconds: dict[int, deque[float]] = {}

    def use_step(self, backend: str) -> None:
        """The step through torch.compile with `backend` (step.compiled_step), or eager for "", with
        the attention chosen; what fall_back() tries after it, in order (compiled before eager, flex
        before bucket attention). The graphs captured for another step are not replayed after it:
        capture again (GPU)."""
        self._set_step(backend)
        self._ladder = [(step, attention) for step in dict.fromkeys((backend, ""))
                        for attention in dict.fromkeys((self.attention, "bucket"))][1:]

    def _set_step(self, backend: str) -> None:
        # every shape a step may take, whichever attention the capture ends with
        shapes = len(self.plan.slot_buckets) * len(self.plan.kv_buckets) * 2
        self.step_fn: Callable[..., None] = compiled_step(backend, shapes) if backend else decode_step
        self.graphs = {}

    @property
    def compiled(self) -> bool:
        """Whether the step runs compiled (DECODE_COMPILE, unless it fell back)."""
        return self.step_fn is not decode_step

    def _flex_function(self) -> Callable[..., torch.Tensor]:
        from torch.nn.attention.flex_attention import flex_attention

        return torch.compile(flex_attention, dynamic=False) if self.gpu else flex_attention

    # ---------- capacity ----------
    def free_slots(self) -> int:
        return len(self._free)

    def idle(self) -> bool:
        return not self.rows and not self._pending and not self._filling

    def kv_bytes_per_slot(self) -> int:
        return kv_bytes_per_slot(len(self.layers), self.kv_heads, self.head_dim, self.plan.max_len, self.dtype)

    # ---------- joining ----------
    def admit(self, items: TensorPage | list[TensorPage]) -> None:
        """Prefill pages into free slots now (all chunks at once); their first tokens, and rows that
        end there, come out of the following steps."""
        for _ in self.prefill(items if isinstance(items, list) else [items]):
            pass

    def prefill(self, items: list[TensorPage]) -> Iterator[None]:
        """Reserve a slot for each page now and return the prefill as chunks (prefill.py): each
        `next()` runs one; the rows decode from the step after the last."""
        if len(items) > len(self._free):
            raise RuntimeError(f"{len(items)} pages but {len(self._free)} free slots")
        for item in items:
            if len(item.input_ids) + item.max_new_tokens > self.plan.max_len:
                raise ValueError(f"prompt {len(item.input_ids)} + max_new_tokens {item.max_new_tokens} exceeds "
                                 f"the slot length {self.plan.max_len}")
        slots = [heapq.heappop(self._free) for _ in items]
        self._filling.update(slots)
        return self._prefill_chunks(items, slots)

    def _prefill_chunks(self, items: list[TensorPage], slots: list[int]) -> Iterator[None]:
        chunks = prefill_pass.run(
            self.model, items, slots, keys=self.keys, values=self.values, pixels=self.pixels,
            experts=self.prefill_experts, moe=self.moe, eos=self.eos, pad=self.pad, image_token=self.image_token,
            views=self.plan.vision_views, upload=self.upload,
            on_done=lambda done, meta: self._joined(items, slots, done, meta))
        end = object()
        try:
            while True:
                with torch.inference_mode():  # per chunk: the caller's steps run between them
                    if next(chunks, end) is end:
                        return
                yield
        finally:
            if self._filling.intersection(slots):  # cut short: the slots go back
                self._filling.difference_update(slots)
                for slot in slots:
                    heapq.heappush(self._free, slot)

    def _joined(self, items: list[TensorPage], slots: list[int], pre: prefill_pass.Prefilled, meta: torch.Tensor) -> None:
        """The prefilled rows' state on the device, their first tokens queued for the host."""
        index, lengths, budget, min_new = meta.unbind(0)
        settings = [self.ngram_for(item) for item in items]
        widest = max(1, max(len(white) for _, _, white in settings))
        white = torch.full((len(items), widest), self.vocab, dtype=torch.long)
        for row, (_, _, ids) in enumerate(settings):
            ids = sorted(i for i in ids if 0 <= i < self.vocab)
            white[row, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        guard = torch.tensor([[max(n, 0) for n, _, _ in settings], [max(w, 0) for _, w, _ in settings]], dtype=torch.long)
        guard, white = self.upload(guard), self.upload(white)
        live = ~pre.done
        self.tok.index_copy_(0, index, pre.first)
        self.pos.index_copy_(0, index, lengths)
        self.count.index_fill_(0, index, 1)
        self.budget.index_copy_(0, index, budget)
        self.min_new.index_copy_(0, index, min_new)
        self.live.index_copy_(0, index, live)
        self.guard.reset_rows(index, guard[0], guard[1], white)
        self.guard.append_rows(index, pre.first, live)
        joined = []
        for row, (item, slot, (n, _, _)) in enumerate(zip(items, slots, settings)):
            r = _Row(item, slot, len(item.input_ids), guarded=n > 0)
            self.rows[slot] = r
            joined.append((row, r))
        self._filling.difference_update(slots)
        self._pending.append(self._readback(joined, pre.first))

    def _readback(self, launched: list[tuple[int, _Row]], tokens: torch.Tensor) -> tuple[list[tuple[int, _Row]], torch.Tensor, Any]:
        """Queue a copy of `tokens` to the host; read when the lag allows (one step behind on a GPU)."""
        if len(tokens) == self.plan.slots:
            host = self._host[self._next_host]
            self._next_host = (self._next_host + 1) % READBACK_BUFFERS
        else:
            host = torch.empty(len(tokens), dtype=torch.long, pin_memory=self.gpu)
        host.copy_(tokens, non_blocking=self.gpu)
        event = None
        if self.gpu:
            event = torch.cuda.Event()
            event.record()
        return launched, host, event

    # ---------- one step ----------
    def step(self) -> list[Finished]:
        """Decode one token for every open row; returns the rows that ended (read one step behind on a GPU)."""
        done = self._expire()
        if self.rows:
            rows = pick(self.plan.slot_buckets, max(self.rows) + 1)
            length = pick(self.plan.kv_buckets, max(r.next_pos for r in self.rows.values()) + 1)
            if self.attention == "flex":
                length = self.plan.max_len  # one shape: the block mask bounds what each row reads
            guard = any(r.guarded for r in self.rows.values())
            t0 = time.perf_counter()
            graph = self.graphs.get((rows, length, guard))
            if graph is not None:
                graph.replay()
            else:
                with torch.inference_mode():
                    self.step_fn(self, rows, length, guard)
            launched = list(self.rows.items())
            for row in self.rows.values():
                row.next_pos += 1
            self._pending.append(self._readback(launched, self.out_tok))
            times = self.step_seconds.get(rows)
            if times is None:
                times = self.step_seconds[rows] = deque(maxlen=STEP_TIMES_KEPT)
            times.append(time.perf_counter() - t0)
        while self._pending and (len(self._pending) > self.lag or not self.rows):
            done += self._read(*self._pending.popleft())
        return done

    def _read(self, launched: list[tuple[int, _Row]], host: torch.Tensor, event: Any) -> list[Finished]:
        if event is not None:
            event.synchronize()
        tokens = host.tolist()
        out = []
        for at, row in launched:
            if not row.closed:
                ended = self._take(row, tokens[at])
                if ended is not None:
                    out.append(ended)
        return out

    def _take(self, row: _Row, tok: int) -> Finished | None:
        """One generated token of a row, as generate_batch keeps it: EOS ends it (not kept), the budget
        ends it (kept), pad tokens are held until a later token shows they are not trailing."""
        row.count += 1
        if tok == self.eos:
            self._flush_pads(row)
            return self._close(row, finished=True, early=False)
        if tok == self.pad:
            row.held += 1
        else:
            self._flush_pads(row)
            self._emit(row, tok)
        if row.count >= row.item.max_new_tokens:
            return self._close(row, finished=False, early=False)
        return None

    def _flush_pads(self, row: _Row) -> None:
        for _ in range(row.held):
            self._emit(row, self.pad)
        row.held = 0

    def _emit(self, row: _Row, tok: int) -> None:
        row.tokens.append(tok)
        if row.item.on_token is not None:
            row.item.on_token(tok)

    def _close(self, row: _Row, *, finished: bool, early: bool) -> Finished:
        row.closed = True
        del self.rows[row.slot]
        self.live[row.slot] = False
        heapq.heappush(self._free, row.slot)
        return Finished(row.item, row.tokens, finished, early)

    def _expire(self) -> list[Finished]:
        """Rows past their deadline or cancelled leave now, with the tokens they have."""
        now = self.clock()
        late = [r for r in self.rows.values() if now > r.item.deadline or r.item.cancelled.is_set()]
        return [self._close(r, finished=False, early=True) for r in late]

    def cancel_all(self) -> list[Finished]:
        return [self._close(r, finished=False, early=True) for r in list(self.rows.values())]

    # ---------- CUDA graphs ----------
    def shapes(self) -> list[tuple[int, int, bool]]:
        """The step shapes captured: (slot bucket, KV length, guard), largest first."""
        lengths = (self.plan.max_len,) if self.attention == "flex" else self.plan.kv_buckets
        return [(rows, length, guard) for rows in reversed(self.plan.slot_buckets)
                for length in reversed(lengths) for guard in (True, False)]

    def capture(self) -> float:
        """One graph per step shape; only while no row is open (the captures run the step on free
        slots). What may not build on a given GPU and torch falls back, in turn, with the error
        logged: the compiled step (DECODE_COMPILE) to the eager one, then flex attention to bucket
        attention. Returns the seconds it took."""
        if not self.gpu or not self.plan.graphs:
            return 0.0
        if self.rows or self._filling:
            raise RuntimeError("graphs are captured before any row joins")
        t0 = time.monotonic()
        while True:
            try:
                self._capture()
                break
            except Exception:  # noqa: BLE001 - compiling (step, flex) is the part that may not build here
                if not self.fall_back("capturing the decode step failed"):  # drops the graphs captured so far
                    raise
                torch.cuda.synchronize()
        self.live.zero_()
        self.capture_seconds = time.monotonic() - t0
        log.info("captured %d decode graphs (%s attention, %s step) in %.2fs", len(self.graphs), self.attention,
                 "compiled" if self.compiled else "eager", self.capture_seconds)
        return self.capture_seconds

    def fall_back(self, why: str) -> bool:
        """One step down after a failure: the compiled step with flex attention, then compiled with
        bucket attention (flex's compiled kernels with a symbolic row count are the part most likely
        not to build), then the eager step with flex (compiled alone, for each shape), then eager
        with bucket attention. False when nothing is left to fall back to."""
        if not self._ladder:
            return False
        step, attention = self._ladder.pop(0)
        log.exception("%s with the %s step and %s attention; falling back to the %s step with %s attention", why,
                      "compiled" if self.compiled else "eager", self.attention, "compiled" if step else "eager", attention)
        self.attention = attention
        self._set_step(step)
        return True

    def _capture(self) -> None:
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for shape in self.shapes():
                self.step_fn(self, *shape)  # warms the kernels (and compiles) of this shape
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.inference_mode():
            for shape in self.shapes():  # largest first: later graphs reuse its pool
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    self.step_fn(self, *shape)
                self.graphs[shape] = graph
        torch.cuda.synchronize()

    # ---------- a whole batch, synchronously ----------
    def run(self, items: list[TensorPage]) -> list[Finished]:
        """Every item to its end, joining as slots free up, up to `prefill_pages` per prefill
        (warm-up, benches, generate_batch)."""
        waiting = deque(items)
        results: dict[int, Finished] = {}
        while waiting or not self.idle():
            joining = []
            while waiting and len(joining) < min(self.plan.prefill_pages, len(self._free)):
                joining.append(waiting.popleft())
            if joining:
                self.admit(joining)
            for ended in self.step():
                results[id(ended.item)] = ended
        return [results[id(item)] for item in items]
