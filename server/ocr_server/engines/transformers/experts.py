"""Which implementation runs the routed experts in the slots decoder, and the MoE block that calls it.

generate() switches transformers' `grouped_mm` experts to `batched_mm` for its decode steps on a
GPU (`_optimize_model_for_decode`); `batched_mm` copies every selected expert's weights per token
(measured: gigabytes written per step at batch 8). The slots decoder does not go through
generate(): its step calls the implementation chosen here directly, so that switch never applies.
`eager` (transformers' loop over the hit experts) reads the hit experts with host syncs
(`nonzero`) and cannot be captured in a CUDA graph; `batched_mm` can, and `grouped_mm` can where
torch has a grouped GEMM kernel for the device: bf16 on sm90 (torch >= 2.8) or sm100 (torch >=
2.9). Elsewhere torch's grouped mm loops over the groups from the host (a sync per call, no graph
capture), so `auto` falls back to `batched_mm` there. On a CPU torch >= 2.9 has a grouped mm kernel
that reads each hit expert once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ...runtime.config import EXPERTS

IMPLEMENTATIONS = ("grouped_mm", "batched_mm", "eager")
CHOICES = EXPERTS  # the EXPERTS setting (runtime/config.py)
# GPU architectures (compute capability major) with a grouped GEMM kernel, and the torch that has it.
GROUPED_GEMM_TORCH = {9: (2, 8), 10: (2, 9)}
CPU_GROUPED_MM_TORCH = (2, 9)


@dataclass(frozen=True)
class Hardware:
    """What the choice depends on: the device type, its dtype, the GPU's compute capability, torch's version."""

    device_type: str
    dtype: torch.dtype
    capability: tuple[int, int] | None = None  # CUDA only
    torch_version: tuple[int, int] = (0, 0)


def torch_version(text: str = torch.__version__) -> tuple[int, int]:
    """(major, minor) of a torch version string such as 2.11.0+cu130."""
    major, minor = text.split("+")[0].split(".")[:2]
    return int(major), int("".join(ch for ch in minor if ch.isdigit()) or 0)


def hardware(device: torch.device, dtype: torch.dtype) -> Hardware:
    """The running machine's Hardware (the only impure part)."""
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    return Hardware(device.type, dtype, capability, torch_version())


def fast_grouped_mm(hw: Hardware) -> bool:
    """Whether torch runs a grouped mm as one kernel, without reading the group sizes on the host."""
    if hw.device_type == "cpu":
        return hw.torch_version >= CPU_GROUPED_MM_TORCH
    if hw.device_type != "cuda" or hw.capability is None or hw.dtype != torch.bfloat16:
        return False
    needed = GROUPED_GEMM_TORCH.get(hw.capability[0])
    return needed is not None and hw.torch_version >= needed


def choose(setting: str, hw: Hardware, graphs: bool) -> str:
    """The implementation for the decode step. `auto`: grouped_mm where it is one kernel (it reads
    each hit expert once whatever the batch), else batched_mm (capturable, no host sync). An explicit
    choice is kept, but one that cannot be captured is refused when CUDA graphs are on."""
    if setting not in CHOICES:
        raise ValueError(f"experts implementation must be one of {', '.join(CHOICES)}, got {setting!r}")
    capture = graphs and hw.device_type == "cuda"
    if setting == "eager" and capture:
        raise ValueError("EXPERTS=eager cannot run in CUDA graphs (it syncs with the host); set CUDA_GRAPHS=false")
    if setting == "grouped_mm" and capture and not fast_grouped_mm(hw):
        raise ValueError(f"EXPERTS=grouped_mm has no grouped GEMM kernel for {hw.dtype} on compute capability "
                         f"{hw.capability} with torch {hw.torch_version[0]}.{hw.torch_version[1]} (it would sync "
                         "with the host and cannot be captured); set EXPERTS=auto or batched_mm")
    if setting != "auto":
        return setting
    return "grouped_mm" if fast_grouped_mm(hw) else "batched_mm"


def choose_prefill(setting: str, hw: Hardware) -> str:
    """The implementation for a prefill (thousands of tokens, never in a graph). batched_mm is never
    used there, whatever EXPERTS says (it names the decode step's): it copies the selected experts'
    weights for every prompt token, 44.6 GiB for 4 pages of the real model on an H200. `auto` and
    `batched_mm` take grouped_mm where it is one kernel (as generate()'s prefill does), else eager;
    an explicit grouped_mm or eager is kept."""
    if setting in ("grouped_mm", "eager"):
        return setting
    return "grouped_mm" if fast_grouped_mm(hw) else "eager"


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
