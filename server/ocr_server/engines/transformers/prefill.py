"""Batched prefill for the slots decoder: k pages in one vision pass and one language-model pass,
their keys and values written straight into their slots.

Why: a page prefilled alone pays the vision tower and the language model for one page, and
generate()'s forward reads the page's first token and masks back to the host (about 50 host syncs
per page on a GPU). Here:
- the views of all k pages go through the vision tower together, grouped by size (every page's
  global view, then every local crop), at most `views` per forward so that the attention biases
  of SAM's global layers stay bounded (12 heads x 4096^2 per 1024 view);
- the prompts are right-padded to the longest: row b holds its prompt at positions 0..L_b-1, the
  positions it has alone, and attends causally to its own first L_b keys (pads never see past
  them, so no row is empty); image features go where the prompt has image tokens, at indices the
  host knows from the prompt ids;
- each layer's keys and values are written into the rows' slots directly (the columns past L_b
  hold padding, which the decode step never reads: it writes position L_b before attending to it);
- the first token of each row comes from its last prompt position; the host learns it with the
  next readback, not here.
Everything the host sends (ids, image positions, lengths, settings) goes up in a few copies from
pinned memory on a GPU; nothing is read back. The work is a generator of chunks (each layer of
the vision tower, then the language model), so the runner can run decode steps between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import torch

from . import vision

if TYPE_CHECKING:
    from .engine import TensorPage


@dataclass(frozen=True)
class Layout:
    """Where k prompts lie in one right-padded batch (pure)."""

    lengths: tuple[int, ...]
    width: int
    image_index: tuple[int, ...]  # flat indices (row * width + column) of the image tokens, row by row


def layout(prompts: Sequence[Sequence[int]], image_token: int) -> Layout:
    """The batch layout of these prompt ids."""
    width = max(len(p) for p in prompts)
    index = tuple(row * width + col for row, ids in enumerate(prompts) for col, tok in enumerate(ids) if tok == image_token)
    return Layout(tuple(len(p) for p in prompts), width, index)


def view_groups(crops: Sequence[int], views: int) -> list[tuple[str, list[tuple[int, int]]]]:
    """The vision forwards of one prefill (pure): global views first, then local crops, at most
    `views` per forward, each as (kind, [(page, crop)]) in page order."""
    out: list[tuple[str, list[tuple[int, int]]]] = []
    for kind, members in (("global", [(p, 0) for p in range(len(crops))]),
                          ("local", [(p, c) for p, n in enumerate(crops) for c in range(n)])):
        for at in range(0, len(members), views):
            out.append((kind, members[at:at + views]))
    return out


class Uploader:
    """Host tensors to the device without waiting: pinned memory and a non-blocking copy on a GPU."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.gpu = device, device.type == "cuda"

    def __call__(self, host: torch.Tensor) -> torch.Tensor:
        if self.gpu:
            host = host.pin_memory()
        return host.to(self.device, non_blocking=True)


@dataclass
class Prefilled:
    """What a finished prefill leaves for the decoder: each row's first token, on the device."""

    first: torch.Tensor  # [k] long
    done: torch.Tensor  # [k] bool: the row ended at its first token (EOS, or a budget of 1)


def run(model: Any, items: list[TensorPage], slots: list[int], *, keys: list[torch.Tensor], values: list[torch.Tensor],
        pixels: Callable[[torch.Tensor], torch.Tensor], experts: Callable[..., torch.Tensor], moe: list[bool],
        eos: int, pad: int, image_token: int, views: int, upload: Uploader,
        on_done: Callable[[Prefilled, torch.Tensor], None]) -> Iterator[None]:
    """The prefill of `items` into `slots`: yields after each layer of each vision forward
    (vision.py); the language model and `on_done(prefilled, meta)` (meta: slots, lengths, budgets,
    minimum tokens on the device) run when the generator is resumed after the last one."""
    from .experts import moe_forward

    device = keys[0].device
    crops = [it.plan.crops for it in items]
    features: list[list[torch.Tensor]] = [[] for _ in items]  # per page: its crops' features, then its global view's
    globals_: list[torch.Tensor | None] = [None] * len(items)
    local_pixels: dict[int, torch.Tensor] = {}  # a page's crops, on the device once
    for kind, members in view_groups(crops, views):
        if kind == "global":
            batch = torch.cat([pixels(items[p].pixel_values) for p, _ in members])
        else:
            for p, _ in members:
                if p not in local_pixels:
                    local_pixels[p] = pixels(items[p].pixel_values_local)
            batch = torch.cat([local_pixels[p][c:c + 1] for p, c in members])
        got: list[torch.Tensor] = []
        yield from vision.features(model, batch, got)
        for (p, _), feats in zip(members, got[0]):
            if kind == "global":
                globals_[p] = feats
            else:
                features[p].append(feats)
    separator = model.model.view_separator[None, :]
    image = torch.cat([torch.cat([*features[p], globals_[p], separator]) for p in range(len(items))])

    lay = layout([it.input_ids for it in items], image_token)
    k, width = len(items), lay.width
    ids = torch.full((k, width), pad, dtype=torch.long)
    for row, it in enumerate(items):
        ids[row, :len(it.input_ids)] = torch.tensor(it.input_ids, dtype=torch.long)
    meta = torch.tensor([list(slots), list(lay.lengths), [it.max_new_tokens for it in items],
                         [it.min_new_tokens for it in items]], dtype=torch.long)
    ids, meta = upload(ids), upload(meta)
    where = upload(torch.tensor(lay.image_index, dtype=torch.long))
    slot_index, lengths, budget, min_new = meta.unbind(0)

    lm = model.model.language_model
    hidden = lm.embed_tokens(ids)
    flat = hidden.view(-1, hidden.shape[-1])
    flat.index_copy_(0, where, image.to(flat.dtype))
    positions = torch.arange(width, device=device)
    cos, sin = lm.rotary_emb(hidden, positions[None, :])
    causal = positions[None, :] <= positions[:, None]  # [query, key]
    mask = (causal[None, :, :] & (positions[None, None, :] < lengths[:, None, None]))[:, None]  # [k, 1, W, W]
    hidden = language_model(lm, hidden, cos, sin, mask, slot_index, keys, values, width, experts, moe, moe_forward)
    last = hidden.gather(1, (lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[-1]))  # [k, 1, D]
    scores = model.lm_head(lm.norm(last))[:, 0, :]
    eos_score = scores[:, eos].masked_fill(min_new > 0, -math.inf)
    scores[:, eos] = eos_score
    first = scores.max(-1).indices  # the first of equal maxima, as argmax (step.py)
    done = (first == eos) | (budget <= 1)
    on_done(Prefilled(first, done), meta)


def language_model(lm: Any, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor,
                   slot_index: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], width: int,
                   experts: Callable[..., torch.Tensor], moe: list[bool], moe_forward: Callable[..., torch.Tensor]) -> torch.Tensor:
    """The decoder layers over [k, W] rows, keys and values into the slots; returns the final hidden states."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import apply_rotary_pos_emb, repeat_kv

    k = hidden.shape[0]
    for layer, block in enumerate(lm.layers):
        attn = block.self_attn
        head_dim = attn.head_dim
        x = block.input_layernorm(hidden)
        q = attn.q_proj(x).view(k, width, -1, head_dim).transpose(1, 2)
        key = attn.k_proj(x).view(k, width, -1, head_dim).transpose(1, 2)
        value = attn.v_proj(x).view(k, width, -1, head_dim).transpose(1, 2)
        q, key = apply_rotary_pos_emb(q, key, cos, sin)
        keys[layer][:, :, :width].index_copy_(0, slot_index, key.to(keys[layer].dtype))
        values[layer][:, :, :width].index_copy_(0, slot_index, value.to(values[layer].dtype))
        groups = attn.num_key_value_groups
        o = torch.nn.functional.scaled_dot_product_attention(q, repeat_kv(key, groups), repeat_kv(value, groups),
                                                             attn_mask=mask, scale=attn.scaling)
        hidden = hidden + attn.o_proj(o.transpose(1, 2).reshape(k, width, -1))
        x = block.post_attention_layernorm(hidden)
        mlp = block.mlp
        hidden = hidden + (moe_forward(mlp, x, experts) if moe[layer] else mlp(x))
    return hidden
