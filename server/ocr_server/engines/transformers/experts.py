"""Which implementation runs the routed experts in the slots decoder, and the MoE block that calls it.

generate() switches transformers' `grouped_mm` experts to `batched_mm` for its decode steps on a
GPU (`_optimize_model_for_decode`); `batched_mm` copies every selected expert's weights per token
(measured: gigabytes written per step at batch 8). The slots decoder does not go through
generate(): its step calls the implementation chosen here directly, so that switch never applies.
`eager` (transformers' loop over the hit experts) reads the hit experts with host syncs
(`nonzero`) and cannot be captured in a CUDA graph; `grouped_mm` and `batched_mm` can.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from ...runtime.config import EXPERTS

IMPLEMENTATIONS = ("grouped_mm", "batched_mm", "eager")
CHOICES = EXPERTS  # the EXPERTS setting (runtime/config.py)


def choose(setting: str, batch: int, device_type: str, graphs: bool) -> str:
    """The implementation for a decode step of `batch` rows. `auto`: grouped_mm, which reads each
    hit expert once whatever the batch (batched_mm copies the selected experts' weights per token;
    eager cannot be captured and syncs with the host)."""
    if setting not in CHOICES:
        raise ValueError(f"experts implementation must be one of {', '.join(CHOICES)}, got {setting!r}")
    if setting == "eager" and graphs:
        raise ValueError("EXPERTS=eager cannot run in CUDA graphs (it syncs with the host); set CUDA_GRAPHS=false")
    return "grouped_mm" if setting == "auto" else setting


def experts_function(name: str) -> Callable[..., torch.Tensor]:
    """(experts_module, hidden [T, D], top_k_index [T, k], top_k_weights [T, k]) -> [T, D]."""
    from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2TextExperts

    if name == "eager":
        return DeepseekOcr2TextExperts.forward.__wrapped__  # the class's own loop, under the dispatching wrapper
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown experts implementation {name!r}")
    return ALL_EXPERTS_FUNCTIONS[name]


def moe_forward(moe: Any, hidden: torch.Tensor, experts: Callable[..., torch.Tensor]) -> torch.Tensor:
    """DeepseekOcr2TextMoe.forward with the routed experts run by `experts` (same ops, same order)."""
    shape = hidden.shape
    _, weights, index = moe.gate(hidden)
    flat = hidden.view(-1, shape[-1])
    routed = experts(moe.experts, flat, index, weights).view(*shape)
    return routed + moe.shared_experts(hidden)
