"""One decode step of the slots decoder on the device, and how its attention reads the KV cache.

Every op works on device tensors of fixed shape for (rows, length, guard), so on a GPU the step is
captured as one CUDA graph per shape. Two ways to attend:
- `bucket`: scaled_dot_product_attention over the first `length` keys of every row (a KV-length
  bucket that holds the longest row), masked by each row's position. One kernel; every row reads
  the bucket.
- `flex`: FlexAttention over the whole slot with a block mask made on the device from the rows'
  positions: each row reads only the key blocks up to its own length (a row of 300 tokens beside
  one of 8000 reads 3 blocks, not 63). Worth it compiled on a GPU; eager it runs as dense math.
The n-gram guard's ops run only in the `guard` variant, used while a live row has the guard on.

A step runs in three regions (`Regions`): embed, each layer, sample. `compiled_step` runs each
through torch.compile (DECODE_COMPILE): on a GPU its graph replay then launches inductor's fused
kernels instead of one per operator (about 157 operators a step for the tests' tiny model; the
full-size model's 12 layers several hundred, each a few microseconds of the H200's launch even
inside a graph).
"""

from __future__ import annotations

import math
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

import torch

if TYPE_CHECKING:
    from .slots import SlotDecoder

ATTENTION = ("auto", "bucket", "flex")
FLEX_BLOCK = 128


def choose_attention(setting: str, device_type: str, compiled: bool) -> str:
    """`auto`: flex where it runs compiled on a GPU (it skips the blocks past each row's length),
    else bucket (measured on a CPU: eager flex is dense math, slower than one SDPA call)."""
    if setting not in ATTENTION:
        raise ValueError(f"decode attention must be one of {', '.join(ATTENTION)}, got {setting!r}")
    if setting != "auto":
        return setting
    return "flex" if device_type == "cuda" and compiled else "bucket"


def flex_block_mask(pos: torch.Tensor, kv_len: int, block: int = FLEX_BLOCK) -> Any:
    """A BlockMask for one query per row over `kv_len` keys: row b sees keys 0..pos[b], and only the
    blocks that hold them are read: the blocks before pos[b]'s as full blocks (no mask computed in
    them), its own as the one partial block. Built from device tensors only (no host sync; capturable)."""
    from torch.nn.attention.flex_attention import BlockMask

    rows = pos.shape[0]
    blocks = -(-kv_len // block)
    last = torch.div(pos, block, rounding_mode="floor").to(torch.int32)[:, None, None]  # [rows, 1, 1]
    index = torch.arange(blocks, device=pos.device, dtype=torch.int32).expand(rows, 1, 1, blocks)
    own = (index + last[..., None]).clamp(max=blocks - 1)  # its first entry: pos[b]'s block

    def visible(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return kv <= pos[b]

    return BlockMask.from_kv_blocks(torch.ones_like(last), own, last, index, BLOCK_SIZE=block, mask_mod=visible,
                                    seq_lengths=(1, kv_len), compute_q_blocks=False)


class Regions(NamedTuple):
    """The three parts of a step, each a function of device tensors: `embed` (the fed tokens'
    embeddings, rotary angles, where each row writes its keys, the attention mask), `layer` (one
    decoder layer: the same code for every layer, its weights and cache given), `sample` (final
    norm, head, guard, greedy choice and bookkeeping). Eager, or each compiled on its own."""

    embed: Callable[..., Any]
    layer: Callable[..., torch.Tensor]
    sample: Callable[..., None]


def embed(d: SlotDecoder, rows: int, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, Any]:
    """The fed tokens' embeddings and rotary angles, the cache position each row writes, and the
    attention mask (flex: a block mask over the whole slot; bucket: over the first `length` keys)."""
    tok, pos = d.tok[:rows], d.pos[:rows]
    hidden = d.lm.embed_tokens(tok)[:, None, :]
    cos, sin = d.lm.rotary_emb(hidden, pos[:, None])
    at = pos.clamp(max=d.plan.max_len - 1)
    if d.attention == "flex":
        mask = flex_block_mask(pos, d.plan.max_len)
    else:
        mask = (d.key_index[None, :length] <= pos[:, None])[:, None, None, :]
    return hidden, cos, sin, at, mask


def layer_step(d: SlotDecoder, block: Any, moe: bool, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               at: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor, mask: Any, kv_len: int,
               experts: Callable[..., torch.Tensor]) -> torch.Tensor:
    """One decoder layer for the rows of `hidden`: their keys and values written into the layer's
    slot cache at `at`, attention over it, the dense or routed MLP. Everything that differs between
    layers is an argument (the block, its cache, whether it routes), so one compiled graph serves
    every layer of a kind; nothing is keyed by the row count, so that count can stay symbolic."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import apply_rotary_pos_emb, repeat_kv

    rows = hidden.shape[0]
    groups = d.heads // d.kv_heads
    index = d.slot_index[:rows]
    attn = block.self_attn
    x = block.input_layernorm(hidden)
    q = attn.q_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
    k = attn.k_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
    v = attn.v_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    cache_k[index, :, at] = k[:, :, 0]
    cache_v[index, :, at] = v[:, :, 0]
    keys, values = cache_k[:rows, :, :kv_len], cache_v[:rows, :, :kv_len]
    if d.attention == "flex":
        o = d.flex(q, keys, values, block_mask=mask, scale=attn.scaling, enable_gqa=groups > 1)
    else:
        if groups > 1:
            keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
        o = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
    hidden = hidden + attn.o_proj(o.transpose(1, 2).reshape(rows, 1, -1))
    x = block.post_attention_layernorm(hidden)
    return hidden + (d.moe_forward(block.mlp, x, experts) if moe else block.mlp(x))


def sample(d: SlotDecoder, hidden: torch.Tensor, guard: bool) -> None:
    """Head, guard, greedy choice and the rows' bookkeeping (next token, position, count, live)."""
    rows = hidden.shape[0]
    tok, pos, live = d.tok[:rows], d.pos[:rows], d.live[:rows]
    # The greedy choice is the same over the model's dtype as over float32 (the conversion is exact
    # and keeps the order): generate() converts first, the step need not. max(-1).indices returns
    # the first of equal maxima, as argmax does, and on a CPU it is 4x faster than argmax in bf16.
    scores = d.head(d.lm.norm(hidden))[:, 0, :]
    if guard:
        d.guard.apply(scores)
    count = d.count[:rows]
    held = count < d.min_new[:rows]
    scores[:, d.eos] = scores[:, d.eos].masked_fill(held, -math.inf)
    nxt = scores.max(-1).indices
    count += live
    ended = live & ((nxt == d.eos) | (count >= d.budget[:rows]))
    if guard:
        d.guard.append(nxt, live)
    d.out_tok[:rows] = nxt
    pos += live
    d.tok[:rows] = torch.where(live, nxt, tok)
    live &= ~ended


EAGER = Regions(embed, layer_step, sample)


def run_step(regions: Regions, d: SlotDecoder, rows: int, length: int, guard: bool) -> None:
    """Embed, every layer, sample, for slots 0..rows-1."""
    experts = d.experts[rows]
    hidden, cos, sin, at, mask = regions.embed(d, rows, length)
    kv_len = d.plan.max_len if d.attention == "flex" else length
    for layer, block in enumerate(d.layers):
        hidden = regions.layer(d, block, d.moe[layer], hidden, cos, sin, at, d.keys[layer], d.values[layer], mask,
                               kv_len, experts)
    regions.sample(d, hidden, guard)


def decode_step(d: SlotDecoder, rows: int, length: int, guard: bool) -> None:
    """The step, eager: one operator at a time (one graph per shape on a GPU)."""
    run_step(EAGER, d, rows, length, guard)


def compiled_step(backend: str, shapes: int) -> Callable[..., None]:
    """The step with each region through torch.compile with `backend` (inductor; aot_eager traces
    without generating code, for tests), each as one whole graph (fullgraph: a graph break would be a
    host sync inside the step). Regions, not the whole step: the layer's code is the same for every
    layer and Dynamo takes a module's weights as inputs, so one layer graph serves every layer of a
    kind (dense or routed) and the compile does not grow with the depth; the guard's variants differ
    in `sample` only. On a CPU (bench/step_compile.py --layers 12), 6 step shapes compiled by inductor
    in 49.0 s as regions against 142.9 s whole, for 251 kernels a step against 232 (what fused across
    the layers' boundaries).
    Shapes are left to Dynamo's automatic dynamic sizes: the first shape (the largest, as the capture
    goes) is compiled for its sizes, the next one with another row count or KV length makes those
    sizes symbolic, and that graph serves every other bucket except a single row: 3 compiles per
    region (and layer kind) instead of one per row bucket (7 on a GPU), each captured as CUDA graphs
    per shape as before. The recompile limit (8 a function) is raised to the `shapes` the decoder
    runs, so no shape falls back to eager unseen."""
    import torch._dynamo.config as dynamo

    dynamo.recompile_limit = max(dynamo.recompile_limit, shapes)
    regions = Regions(*(torch.compile(f, backend=backend, fullgraph=True) for f in EAGER))
    return partial(run_step, regions)
