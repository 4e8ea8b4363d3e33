"""Pixel normalisation on the model's device: pages travel as uint8, a quarter of float32's bytes.

The image processor resizes, crops and pads in uint8 and then rescales and normalises per channel,
so a normalised value depends only on (channel, uint8 level). `normalisation_table` runs the
processor's own rescale and normalize over the 256 levels of each channel once; `normalise` looks
the page's levels up on the device. The result is bit for bit the processor's (tests/unit/server/
test_pixels.py), so tokens cannot change; the worker threads skip the float work and a GPU receives
the uint8 tensor from pinned memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

CHANNELS = 3


def normalisation_table(processor: Any) -> torch.Tensor:
    """[3, 256] float32: the processor's normalised value of each uint8 level in each channel."""
    levels = np.broadcast_to(np.arange(256, dtype=np.uint8), (CHANNELS, 1, 256)).copy()
    values = levels
    if processor.do_rescale:
        values = processor.rescale(values, processor.rescale_factor)
    if processor.do_normalize:
        values = processor.normalize(values, processor.image_mean, processor.image_std)
    return torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).reshape(CHANNELS, 256)


def normalise(pixels: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """uint8 [n, 3, h, w] -> table's dtype, on pixels' device (table must be there too)."""
    if pixels.dtype != torch.uint8 or pixels.dim() != 4 or pixels.shape[1] != CHANNELS:
        raise ValueError(f"expected uint8 [n, {CHANNELS}, h, w] pixels, got {pixels.dtype} {list(pixels.shape)}")
    channel = torch.arange(CHANNELS, device=pixels.device).view(1, CHANNELS, 1, 1)
    return table[channel, pixels.long()]
