"""The crop plan of one page: a global view plus an optional grid of crops, as the model is shown it.

Both engines describe a page with a CropPlan (vLLM's own grid rule lives with its engine); the
transformers engine and page splitting choose the grid with `plan_crops`, the official rule.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocr_limits import MIN_CROPS, visual_tokens


@dataclass(frozen=True)
class CropPlan:
    """How one page is shown to the model: a global view plus an optional grid of crops."""

    width: int
    height: int
    base_size: int
    crop_size: int
    cols: int
    rows: int

    @property
    def crops(self) -> int:
        return self.cols * self.rows

    @property
    def visual_tokens(self) -> int:
        """Tokens the LLM sees for this page, not counting the one view separator."""
        return visual_tokens(self.crops)


def plan_crops(width: int, height: int, *, crop_size: int, base_size: int, min_crops: int, max_crops: int) -> CropPlan:
    """The official rule, via transformers' own grid search so both always agree.

    An image no larger than crop_size on both sides gets the global view only. Otherwise the grid
    (cols, rows) with min(2, min_crops) <= cols*rows <= max_crops whose aspect ratio is closest to
    the image's is chosen. max_crops < 2 (a low MAX_VISUAL_TOKENS) means global view only.
    """
    from transformers.models.deepseek_ocr2.image_processing_pil_deepseek_ocr2 import get_optimal_tiled_canvas

    if max(width, height) <= crop_size or max_crops < MIN_CROPS:
        return CropPlan(width, height, base_size, crop_size, 0, 0)
    lo = max(MIN_CROPS, min_crops)
    cols, rows = get_optimal_tiled_canvas((height, width), (crop_size, crop_size), lo, max_crops)
    return CropPlan(width, height, base_size, crop_size, cols, rows)
