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

`compiled_step` is the same function through torch.compile (DECODE_COMPILE): on a GPU its graph
replay then launches inductor's fused kernels instead of one per operator (about 157 operators a
step for the tests' tiny model; the full-size model's 12 layers several hundred, each a few
microseconds of the H200's launch even inside a graph).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

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
    blocks that hold them are read. Built from device tensors only (no host sync; capturable)."""
    from torch.nn.attention.flex_attention import BlockMask

    rows = pos.shape[0]
    blocks = -(-kv_len // block)
    num = torch.div(pos, block, rounding_mode="floor").add(1).to(torch.int32)[:, None, None]  # [rows, 1, 1]
    index = torch.arange(blocks, device=pos.device, dtype=torch.int32).expand(rows, 1, 1, blocks)

    def visible(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return kv <= pos[b]

    return BlockMask.from_kv_blocks(num, index, BLOCK_SIZE=block, mask_mod=visible, seq_lengths=(1, kv_len),
                                    compute_q_blocks=False)


def decode_step(d: SlotDecoder, rows: int, length: int, guard: bool) -> None:
    """Embed, language model, head, guard, argmax and bookkeeping for slots 0..rows-1."""
    step_body(d, rows, length, guard, d.experts[rows])


def step_body(d: SlotDecoder, rows: int, length: int, guard: bool, experts: Callable[..., torch.Tensor]) -> None:
    """`decode_step` with the bucket's experts function given: the body reads no value keyed by
    `rows`, so a compile can keep the row count symbolic."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import apply_rotary_pos_emb, repeat_kv

    tok, pos, live = d.tok[:rows], d.pos[:rows], d.live[:rows]
    hidden = d.lm.embed_tokens(tok)[:, None, :]
    cos, sin = d.lm.rotary_emb(hidden, pos[:, None])
    at = pos.clamp(max=d.plan.max_len - 1)
    flex = d.attention == "flex"
    if flex:
        mask, kv_len = flex_block_mask(pos, d.plan.max_len), d.plan.max_len
    else:
        mask, kv_len = (d.key_index[None, :length] <= pos[:, None])[:, None, None, :], length
    index = d.slot_index[:rows]
    groups = d.heads // d.kv_heads
    for layer, block in enumerate(d.layers):
        attn = block.self_attn
        x = block.input_layernorm(hidden)
        q = attn.q_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(rows, 1, -1, d.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        cache_k, cache_v = d.keys[layer], d.values[layer]
        cache_k[index, :, at] = k[:, :, 0]
        cache_v[index, :, at] = v[:, :, 0]
        keys, values = cache_k[:rows, :, :kv_len], cache_v[:rows, :, :kv_len]
        if flex:
            o = d.flex(q, keys, values, block_mask=mask, scale=attn.scaling, enable_gqa=groups > 1)
        else:
            if groups > 1:
                keys, values = repeat_kv(keys, groups), repeat_kv(values, groups)
            o = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
        hidden = hidden + attn.o_proj(o.transpose(1, 2).reshape(rows, 1, -1))
        x = block.post_attention_layernorm(hidden)
        mlp = block.mlp
        hidden = hidden + (d.moe_forward(mlp, x, experts) if d.moe[layer] else mlp(x))
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


def compiled_step(backend: str, shapes: int) -> Callable[..., None]:
    """`decode_step` through torch.compile with `backend` (inductor; aot_eager traces without
    generating code, for tests), as one whole graph (fullgraph: a graph break would be a host sync
    inside the step). Shapes are left to Dynamo's automatic dynamic sizes: the first shape (the
    largest, as the capture goes) is compiled for its sizes, the next one with another row count or
    KV length makes those sizes symbolic, and that graph serves every other bucket except a single
    row: 3 compiles per guard variant instead of one per row bucket (7 on a GPU), each captured as
    CUDA graphs per shape as before. The recompile limit (8 a function) is raised to the `shapes`
    the decoder runs, so no shape falls back to eager unseen."""
    import torch._dynamo.config as dynamo

    dynamo.recompile_limit = max(dynamo.recompile_limit, shapes)
    body = torch.compile(step_body, backend=backend, fullgraph=True)

    def step(d: SlotDecoder, rows: int, length: int, guard: bool) -> None:
        body(d, rows, length, guard, d.experts[rows])

    return step
