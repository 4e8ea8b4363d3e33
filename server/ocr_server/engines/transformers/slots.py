"""The slots decoder: a slot KV cache, one decode step over slots, rows joining and leaving between steps.

Why: generate() decodes a static batch (new pages wait for the longest page), launches many small
kernels per step from Python and waits for the GPU several times per step. Here:
- each new page is prefilled alone (vision encoder and language-model prefill, the same forward
  generate() runs for a batch of one) into its own cache; its keys and values are then copied into
  a free slot of per-layer buffers [slots, kv_heads, max_len, head_dim], with a length per slot;
- one step function decodes every slot of a slot bucket at once: embed, language model (attention
  over a KV-length bucket, masked by the slots' lengths), output head, n-gram guard (tensor ops,
  ngram_guard.py), argmax, EOS and per-row budget bookkeeping. No host sync inside: on a GPU it is
  captured as one CUDA graph per (slot bucket x KV-length bucket) and replayed;
- positions are each row's own (0..prompt-1, then one more per token), the positions generate()
  gives a left-padded row, so the tokens are the same;
- the host learns each step's tokens from a copy to pinned memory, one step behind on a GPU (the
  next step is already queued), and frees a finished, cancelled or expired row's slot at once.

The step writes only device state; the host mirrors lengths (an upper bound) to pick buckets.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch

from .experts import choose as choose_experts
from .experts import experts_function, moe_forward
from .ngram_guard import TensorNGramGuard

if TYPE_CHECKING:
    from .engine import TensorPage

log = logging.getLogger("ocr_server.slots")


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


# ---------- host-side row bookkeeping ----------

@dataclass
class _Row:
    item: TensorPage
    slot: int
    next_pos: int  # position of the token the next step feeds (an upper bound once the device stops it)
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
                 collate: Callable[[list[TensorPage]], dict[str, Any]],
                 ngram_for: Callable[[TensorPage], tuple[int, int, set[int]]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.model, self.plan, self.eos, self.pad = model, plan, eos, pad
        self.collate, self.ngram_for, self.clock = collate, ngram_for, clock
        text = model.config.text_config
        lm = model.model.language_model
        self.lm, self.layers, self.head = lm, list(lm.layers), model.lm_head
        # Which layers route to experts (the others are dense: the config's first_k_dense_replace).
        from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2TextMoe

        self.moe = [isinstance(block.mlp, DeepseekOcr2TextMoe) for block in self.layers]
        self.device, self.dtype = model.device, model.dtype
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
        self.experts = {b: experts_function(choose_experts(plan.experts, b, dev.type, plan.graphs and self.gpu))
                        for b in plan.slot_buckets}
        self.graphs: dict[tuple[int, int], Any] = {}
        self.capture_seconds = 0.0
        host = dict(dtype=torch.long, pin_memory=self.gpu)
        self._host = [torch.zeros(s, **host) for _ in range(2)]
        self._events = [torch.cuda.Event() for _ in range(2)] if self.gpu else [None, None]
        self._flip = 0
        self._free = list(range(s))
        heapq.heapify(self._free)
        self.rows: dict[int, _Row] = {}
        self._pending: deque[tuple[list[tuple[int, _Row]], torch.Tensor, Any]] = deque()
        self.lag = 1 if self.gpu else 0  # steps the host reads behind the device
        self.step_seconds: dict[int, list[float]] = {}  # rows -> host time per step (bench)

    # ---------- capacity ----------
    def free_slots(self) -> int:
        return len(self._free)

    def idle(self) -> bool:
        return not self.rows and not self._pending

    def kv_bytes_per_slot(self) -> int:
        return kv_bytes_per_slot(len(self.layers), self.kv_heads, self.head_dim, self.plan.max_len, self.dtype)

    # ---------- joining ----------
    @torch.inference_mode()
    def admit(self, item: TensorPage) -> Finished | None:
        """Prefill one page into a free slot and take its first token; a row that ends there is returned."""
        if not self._free:
            raise RuntimeError("no free slot")
        prompt = len(item.input_ids)
        if prompt + item.max_new_tokens > self.plan.max_len:
            raise ValueError(f"prompt {prompt} + max_new_tokens {item.max_new_tokens} exceeds the slot length {self.plan.max_len}")
        slot = heapq.heappop(self._free)
        out = self.model(**self.collate([item]), use_cache=True, logits_to_keep=1)
        for layer, cached in enumerate(out.cache.layers):
            self.keys[layer][slot, :, :prompt] = cached.keys[0]
            self.values[layer][slot, :, :prompt] = cached.values[0]
        scores = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)
        n, window, whitelist = self.ngram_for(item)
        self.guard.reset(slot, n, window, whitelist)  # nothing generated: it bans nothing yet
        if item.min_new_tokens > 0:
            scores[:, self.eos] = -math.inf
        first = scores.argmax(-1)
        done = (first == self.eos) | (item.max_new_tokens <= 1)
        self.tok[slot:slot + 1] = first
        self.pos[slot] = prompt
        self.count[slot] = 1
        self.budget[slot] = item.max_new_tokens
        self.min_new[slot] = item.min_new_tokens
        self.live[slot:slot + 1] = ~done
        self.guard.append(first, ~done, start=slot)
        row = _Row(item, slot, prompt)
        self.rows[slot] = row
        return self._take(row, int(first.item()))  # one sync per joining page: its prefill is done

    # ---------- one step ----------
    def step(self) -> list[Finished]:
        """Decode one token for every open row; returns the rows that ended (read one step behind on a GPU)."""
        done = self._expire()
        if self.rows:
            rows = pick(self.plan.slot_buckets, max(self.rows) + 1)
            length = pick(self.plan.kv_buckets, max(r.next_pos for r in self.rows.values()) + 1)
            t0 = time.perf_counter()
            graph = self.graphs.get((rows, length))
            if graph is not None:
                graph.replay()
            else:
                with torch.inference_mode():
                    self._step(rows, length)
            launched = list(self.rows.items())
            for row in self.rows.values():
                row.next_pos += 1
            host, event = self._host[self._flip], self._events[self._flip]
            self._flip ^= 1
            host[:rows].copy_(self.out_tok[:rows], non_blocking=self.gpu)
            if event is not None:
                event.record()
            self._pending.append((launched, host, event))
            self.step_seconds.setdefault(rows, []).append(time.perf_counter() - t0)
        while self._pending and (len(self._pending) > self.lag or not self.rows):
            done += self._read(*self._pending.popleft())
        return done

    def _read(self, launched: list[tuple[int, _Row]], host: torch.Tensor, event: Any) -> list[Finished]:
        if event is not None:
            event.synchronize()
        tokens = host.tolist()
        out = []
        for slot, row in launched:
            if not row.closed:
                ended = self._take(row, tokens[slot])
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

    # ---------- the step on the device ----------
    def _step(self, rows: int, length: int) -> None:
        """Every op on device tensors of fixed shape for (rows, length): capturable as one graph."""
        from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import apply_rotary_pos_emb, repeat_kv

        tok, pos, live = self.tok[:rows], self.pos[:rows], self.live[:rows]
        hidden = self.lm.embed_tokens(tok)[:, None, :]
        cos, sin = self.lm.rotary_emb(hidden, pos[:, None])
        visible = (self.key_index[None, :length] <= pos[:, None])[:, None, None, :]
        at = pos.clamp(max=self.plan.max_len - 1)
        index = self.slot_index[:rows]
        experts = self.experts[rows]
        groups = self.heads // self.kv_heads
        for layer, block in enumerate(self.layers):
            attn = block.self_attn
            x = block.input_layernorm(hidden)
            q = attn.q_proj(x).view(rows, 1, -1, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(rows, 1, -1, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(rows, 1, -1, self.head_dim).transpose(1, 2)
            q, k = apply_rotary_pos_emb(q, k, cos, sin)
            cache_k, cache_v = self.keys[layer], self.values[layer]
            cache_k[index, :, at] = k[:, :, 0]
            cache_v[index, :, at] = v[:, :, 0]
            keys, values = cache_k[:rows, :, :length], cache_v[:rows, :, :length]
            if groups > 1:
                keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
            o = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=visible, scale=attn.scaling)
            hidden = hidden + attn.o_proj(o.transpose(1, 2).reshape(rows, 1, -1))
            x = block.post_attention_layernorm(hidden)
            mlp = block.mlp
            hidden = hidden + (moe_forward(mlp, x, experts) if self.moe[layer] else mlp(x))
        scores = self.head(self.lm.norm(hidden))[:, 0, :].to(torch.float32)
        scores = scores.masked_fill(self.guard.bans(rows), -math.inf)
        count = self.count[:rows]
        scores[:, self.eos] = scores[:, self.eos].masked_fill(count < self.min_new[:rows], -math.inf)
        nxt = scores.argmax(-1)
        count += live.long()
        ended = live & ((nxt == self.eos) | (count >= self.budget[:rows]))
        self.guard.append(nxt, live)
        self.out_tok[:rows] = nxt
        pos += live.long()
        self.tok[:rows] = torch.where(live, nxt, tok)
        self.live[:rows] = live & ~ended

    # ---------- CUDA graphs ----------
    def capture(self) -> float:
        """One graph per (slot bucket x KV-length bucket); only while no row is open (the captures
        run the step on free slots). Returns the seconds it took."""
        if not self.gpu or not self.plan.graphs:
            return 0.0
        if self.rows:
            raise RuntimeError("graphs are captured before any row joins")
        t0 = time.monotonic()
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for rows in self.plan.slot_buckets:
                for length in self.plan.kv_buckets:
                    self._step(rows, length)  # warms the kernels and allocations of this shape
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        with torch.inference_mode():
            for rows in reversed(self.plan.slot_buckets):  # largest first: later graphs reuse its pool
                for length in reversed(self.plan.kv_buckets):
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool):
                        self._step(rows, length)
                    self.graphs[(rows, length)] = graph
        torch.cuda.synchronize()
        self.live.zero_()
        self.capture_seconds = time.monotonic() - t0
        log.info("captured %d decode graphs (%d slot buckets x %d KV buckets) in %.2fs", len(self.graphs),
                 len(self.plan.slot_buckets), len(self.plan.kv_buckets), self.capture_seconds)
        return self.capture_seconds

    # ---------- a whole batch, synchronously ----------
    def run(self, items: list[TensorPage]) -> list[Finished]:
        """Every item to its end, joining as slots free up (warm-up, benches, generate_batch)."""
        waiting = deque(items)
        results: dict[int, Finished] = {}
        while waiting or not self.idle():
            while waiting and self._free:
                item = waiting.popleft()
                ended = self.admit(item)
                if ended is not None:
                    results[id(item)] = ended
            for ended in self.step():
                results[id(ended.item)] = ended
        return [results[id(item)] for item in items]
