"""SAM's relative-position lookup with its index on the model's device.

transformers' `DeepseekOcr2SamVisionAttention.get_rel_pos` builds the relative coordinates with
`torch.arange` on the CPU and indexes the (device) position table with them: on a GPU every
attention layer of every view copies a CPU index to the device, a copy from pageable memory that
waits for the GPU. The index depends only on the query and key sizes, so it is built once per
(sizes, device) and kept there; the table itself is interpolated as before (it is a weight). Same
arithmetic, the same values: the coordinates are computed in float32 as the original computes them.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F


def _rel_pos_on_device(self: Any, q_size: int, k_size: int, rel_pos: torch.Tensor) -> torch.Tensor:
    max_rel_dist = int(2 * max(q_size, k_size) - 1)
    resized = F.interpolate(rel_pos.reshape(1, rel_pos.shape[0], -1).transpose(1, 2), size=max_rel_dist, mode="linear")
    resized = resized.reshape(-1, max_rel_dist).permute(1, 0)
    key = (q_size, k_size, rel_pos.device)
    index = self._device_rel_index.get(key)
    if index is None:
        q_coords = torch.arange(q_size)[:, None] * max(k_size / q_size, 1.0)
        k_coords = torch.arange(k_size)[None, :] * max(q_size / k_size, 1.0)
        index = ((q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)).long().to(rel_pos.device)
        self._device_rel_index[key] = index
    return resized[index]


def install(model: Any) -> int:
    """Give every SAM attention layer of `model` the device-side lookup; returns how many it changed."""
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionAttention

    changed = 0
    for module in model.modules():
        if isinstance(module, DeepseekOcr2SamVisionAttention) and getattr(module, "use_rel_pos", False):
            if not hasattr(module, "_device_rel_index"):  # installed once per model: its indices are kept
                module._device_rel_index = {}
                module.get_rel_pos = types.MethodType(_rel_pos_on_device, module)
                changed += 1
    return changed
