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
there), so on a CPU `install` gives the dense forward below. Same function: `forward` against
transformers' own on random weights agrees to float32 rounding (tests/unit/server).

On a CPU the bias stays dense, but built in the layout SDPA reads. transformers' einsums return
rel_h and rel_w with permuted strides; the broadcast add takes its output's layout from them, and
the reshape to [views, heads, N, N] then copies the whole bias again (0.65 s of a 6.6 s prefill of one
1024x1024 page on 2 cores). `dense_forward` makes the two small terms contiguous first, so the add
writes the bias once, in place for SDPA. The same operations otherwise, so the same bits: 14-19 %
less time in a global SAM layer (bench: 64x64 tokens 785 -> 637 ms, three 48x48 crops 758 -> 652 ms).
And it writes it into memory kept from the layer before (`BiasBuffer`): a fresh bias of 400 MB is
far above glibc's mmap threshold (32 MB at most), so every global layer mapped it anew and took a
page fault for each 4 KiB it wrote. Per global layer of a 1024 px view in bf16 (torch's profiler,
one admit on 2 cores): transformers' add 121 ms and copy 93 ms, the dense forward's add 23 ms.
"""

from __future__ import annotations

import math
import threading
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


def relative_terms(self: Any, query: torch.Tensor, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """rel_h [views * heads, rows, cols, rows] and rel_w [.., cols], contiguous: transformers'
    `get_decomposed_rel_pos` before its broadcast add, from query [views, heads, tokens, head] (or
    [views * heads, tokens, head])."""
    grid = query.reshape(-1, rows, cols, query.shape[-1])
    rel_h = torch.einsum("bhwc,hkc->bhwk", grid, self.get_rel_pos(rows, rows, self.rel_pos_h))
    rel_w = torch.einsum("bhwc,wkc->bhwk", grid, self.get_rel_pos(cols, cols, self.rel_pos_w))
    return rel_h.contiguous(), rel_w.contiguous()


class BiasBuffer:
    """Memory for the dense bias, kept from one SAM layer to the next and grown to the largest bias
    asked for (the same peak as a fresh bias a layer, held after it): one per model and thread, so
    a bias is never written while another thread's SDPA reads it."""

    def __init__(self) -> None:
        self._local = threading.local()

    def __reduce__(self) -> tuple[type, tuple[()]]:
        """A copy (copy.deepcopy of a layer, pickling) is a new, empty buffer: what it holds is scratch."""
        return BiasBuffer, ()

    def take(self, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
        """An uninitialised tensor of `shape`, `like`'s dtype and device, over the kept memory."""
        n = math.prod(shape)
        flat = getattr(self._local, "flat", None)
        if flat is None or flat.numel() < n or flat.dtype != like.dtype or flat.device != like.device:
            self._local.flat = None  # the old block freed before the larger one is taken
            flat = self._local.flat = torch.empty(n, dtype=like.dtype, device=like.device)
        return flat[:n].view(shape)


def dense_bias(self: Any, rel_h: torch.Tensor, rel_w: torch.Tensor) -> torch.Tensor:
    """rel_h[..., None] + rel_w[..., None, :] as [views * heads, rows, cols, rows, cols], into the
    layer's kept buffer when autograd does not need the result (inference)."""
    shape = (*rel_h.shape, rel_w.shape[-1])
    buffer = getattr(self, "_sam_bias", None)
    if buffer is None or torch.is_grad_enabled():
        return rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]
    return torch.add(rel_h[:, :, :, :, None], rel_w[:, :, :, None, :], out=buffer.take(shape, rel_h))


def dense_forward(self: Any, hidden_states: torch.Tensor, output_attentions: bool = False) -> tuple[torch.Tensor, None]:
    """DeepseekOcr2SamVisionSdpaAttention.forward with the dense bias written once (CPU; see the
    module's docstring): transformers' operations, in its order, on contiguous terms."""
    batch, rows, cols, _ = hidden_states.shape
    heads, tokens = self.num_attention_heads, rows * cols
    qkv = self.qkv(hidden_states).reshape(batch, tokens, 3, heads, -1).permute(2, 0, 3, 1, 4)
    query, key, value = qkv.reshape(3, batch * heads, tokens, -1).unbind(0)
    mask = None
    if self.use_rel_pos:
        rel_h, rel_w = relative_terms(self, query, rows, cols)
        mask = dense_bias(self, rel_h, rel_w).view(batch, heads, tokens, tokens)
    shape = (batch, heads, tokens, -1)
    out = F.scaled_dot_product_attention(query.view(shape), key.view(shape), value.view(shape), attn_mask=mask)
    out = out.view(batch, heads, rows, cols, -1).permute(0, 2, 3, 1, 4).reshape(batch, rows, cols, -1)
    return self.proj(out), None


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
        rel_h, rel_w = relative_terms(self, query, rows, cols)
        rel_h, rel_w = rel_h.reshape(batch, heads, tokens, rows), rel_w.reshape(batch, heads, tokens, cols)
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
    """Give every SAM SDPA attention layer of a model the forward for its device (folded on a GPU,
    dense on a CPU); returns how many it changed (none twice)."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionSdpaAttention

    changed, buffer = 0, BiasBuffer()
    for module in model.modules():
        if not isinstance(module, DeepseekOcr2SamVisionSdpaAttention) or "forward" in vars(module):
            continue  # not SAM's attention, or given its forward already (an instance attribute)
        if module.qkv.weight.device.type == "cuda":
            module._sam_key_positions = {}
            module.forward = types.MethodType(forward, module)
        else:
            module._sam_bias = buffer  # one for all the model's layers: they run one after another
            module.forward = types.MethodType(dense_forward, module)
        changed += 1
    return changed
