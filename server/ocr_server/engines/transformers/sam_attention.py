"""SAM's attention with its relative-position bias folded into the dot product (GPU).

transformers' SAM attention adds a decomposed relative-position bias, rel_h[q, row(k)] +
rel_w[q, col(k)], to the scores by building it whole, [views, heads, N, N] for N tokens (4096 for a
1024 view, 2304 for a 768 crop: 400 MB and 130 MB a view a layer in bf16), and hands it to SDPA as
a dense mask. On an H200, building it (a broadcast add), copying it (a reshape) and reading it back
in the memory-efficient kernel was 60 % of a prefill of 8 pages (bench/prefill_profile.py,
2026-12-04: 77 + 58 + 66 ms of 351).

The same sum is a dot product. With s the softmax scale,
    q' = [q | rel_h(q) / s | rel_w(q) / s]    k' = [k | onehot(row(k)) | onehot(col(k))]
q'.k' s = q.k s + rel_h[q, row(k)] + rel_w[q, col(k)]. So SDPA runs without a mask on a longer head
(C + H + W, padded with zeros to a multiple of 8), v padded alike so that the fused kernels (flash)
take it, and the output is cut back to C. Three times the attention's arithmetic, none of its
bias traffic: on a GPU that is the better trade; on a CPU it is not (the arithmetic is the cost
there), so `install` leaves a model on a CPU as it is. Same function: `forward` against
transformers' own on random weights agrees to float32 rounding (tests/unit/server).
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F

ALIGN = 8  # head widths the fused SDPA kernels take in 16-bit types


def padded_width(head: int, rows: int, cols: int) -> int:
    """The augmented head's width: C + H + W, rounded up to ALIGN (pure)."""
    return -(-(head + rows + cols) // ALIGN) * ALIGN


def key_positions(rows: int, cols: int, width: int, head: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """[rows * cols, width]: zeros over the head, then each key's row one-hot, then its column one-hot."""
    out = torch.zeros(rows * cols, width, device=device, dtype=dtype)
    index = torch.arange(rows * cols, device=device)
    out[index, head + index // cols] = 1
    out[index, head + rows + index % cols] = 1
    return out


def forward(self: Any, hidden_states: torch.Tensor, output_attentions: bool = False) -> tuple[torch.Tensor, None]:
    """DeepseekOcr2SamVisionSdpaAttention.forward without the materialised bias (see the module's docstring)."""
    batch, rows, cols, _ = hidden_states.shape
    heads, tokens = self.num_attention_heads, rows * cols
    qkv = self.qkv(hidden_states).reshape(batch, tokens, 3, heads, -1).permute(2, 0, 3, 1, 4)
    query, key, value = qkv.unbind(0)  # [batch, heads, tokens, head]
    head = query.shape[-1]
    scale = head ** -0.5
    if not self.use_rel_pos:
        out = F.scaled_dot_product_attention(query, key, value)
    else:
        table_h = self.get_rel_pos(rows, rows, self.rel_pos_h)  # [rows, rows, head]
        table_w = self.get_rel_pos(cols, cols, self.rel_pos_w)  # [cols, cols, head]
        grid = query.reshape(batch * heads, rows, cols, head)
        rel_h = torch.einsum("bhwc,hkc->bhwk", grid, table_h).reshape(batch, heads, tokens, rows)
        rel_w = torch.einsum("bhwc,wkc->bhwk", grid, table_w).reshape(batch, heads, tokens, cols)
        width = padded_width(head, rows, cols)
        cache_key = (rows, cols, width, query.device, query.dtype)
        positions = self._sam_key_positions.get(cache_key)
        if positions is None:
            positions = self._sam_key_positions[cache_key] = key_positions(rows, cols, width, head, query.device, query.dtype)
        # Each written once: the parts side by side (a zeroed copy written over would write q and k twice).
        pad = query.new_zeros(batch, heads, tokens, width - head - rows - cols)
        q = torch.cat((query, rel_h / scale, rel_w / scale, pad), dim=-1)
        k = torch.cat((key, positions[:, head:].expand(batch, heads, tokens, width - head)), dim=-1)
        v = F.pad(value, (0, width - head))
        out = F.scaled_dot_product_attention(q, k, v, scale=scale)[..., :head]
    out = out.reshape(batch, heads, rows, cols, head).permute(0, 2, 3, 1, 4).reshape(batch, rows, cols, -1)
    return self.proj(out), None


def install(model: Any) -> int:
    """Give every SAM attention layer of a model on a GPU this forward; returns how many it changed
    (none on a CPU, none twice)."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionAttention

    changed = 0
    for module in model.modules():
        if (isinstance(module, DeepseekOcr2SamVisionAttention) and module.qkv.weight.device.type == "cuda"
                and not hasattr(module, "_sam_key_positions")):
            module._sam_key_positions = {}
            module.forward = types.MethodType(forward, module)
            changed += 1
    return changed
