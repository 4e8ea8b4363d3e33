"""The image processor, with each page's global view placed where the model's own code places it.

DeepSeek-OCR 2's reference preprocessing (and vLLM's processor, which copies it) makes the global
view with PIL's `ImageOps.pad`: the page resized to fit the base size, then pasted at
round(margin / 2), Python's round (half to even). transformers' DeepseekOcr2ImageProcessorPil pastes
it at margin // 2. The two differ by one pixel row (or column) whenever the margin is odd and its
half rounds up: a 600x500 page at 1024 leaves a margin of 171, PIL puts the page at row 86,
transformers at 85. So the same page reached the vision tower as other pixels than the model was
trained on, and than the vLLM engine gives it (tests/server/test_engine_equivalence.py saw the
tokens part). Here the processor pads as `ImageOps.pad` does; its resize, crops, rescale and
normalisation are its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def pad_offset(margin: int) -> int:
    """Where `ImageOps.pad` (centering 0.5) puts a page that leaves `margin` pixels over (pure)."""
    return round(margin * 0.5)


def pad_to_square(image: np.ndarray, background_color: int | tuple[int, ...] | list[int] = 0) -> np.ndarray:
    """A channels-first page on a square of its longer side, in `background_color`, at `pad_offset`."""
    channels, height, width = image.shape
    if height == width:
        return image
    colors = [background_color] if isinstance(background_color, int) else list(background_color)
    if len(colors) not in (1, channels):
        raise ValueError(f"background_color must have 1 or {channels} values, got {len(colors)}")
    side = max(height, width)
    out = np.empty((channels, side, side), dtype=image.dtype)
    out[:] = np.asarray(colors, dtype=image.dtype).reshape(-1, 1, 1)
    if width > height:
        top = pad_offset(side - height)
        out[:, top:top + height, :] = image
    else:
        left = pad_offset(side - width)
        out[:, :, left:left + width] = image
    return out


def image_processor(base_size: int, input_size: int) -> Any:
    """transformers' DeepSeek-OCR 2 image processor for these sizes, padding its global views as
    `ImageOps.pad` does."""
    from transformers import DeepseekOcr2ImageProcessorPil

    class ImageProcessor(DeepseekOcr2ImageProcessorPil):
        def pad_to_square(self, image: np.ndarray, background_color: Any = 0) -> np.ndarray:
            return pad_to_square(image, background_color)

    return ImageProcessor(size={"height": base_size, "width": base_size}, tile_size=input_size)
