"""DeepSeek-OCR 2's visual-token arithmetic: what a page costs for a number of crops.

The model shows a page as one global view (BASE_SIZE px square) plus no crops or MIN_CROPS..MAX_CROPS
local crops (CROP_SIZE px each, the server's INPUT_SIZE). Every view is cut into 16 px patches and
downsampled 4x4, so a view of `size` px costs (size / 64)^2 tokens, and the model has learned query
embeddings of that length for 768 px (144) and 1024 px (256) views only. A page therefore costs
256 + 144 per crop: 256, 544, 688, 832, 976 or 1120 tokens (one crop never happens: a page larger
than one crop is cut into at least two). The view separator token is not counted.
"""

from __future__ import annotations

import math

PATCH_SIZE = 16
DOWNSAMPLE = 4
TOKEN_STRIDE = PATCH_SIZE * DOWNSAMPLE  # pixels of one side of the image per token side: 64
VIEW_SIZES = (768, 1024)  # the view sides the model has query embeddings for
CROP_SIZE = 768  # a local crop (INPUT_SIZE, spec.inference.inputSize)
BASE_SIZE = 1024  # the global view (BASE_SIZE, spec.inference.baseSize)
MIN_CROPS = 2  # the grid search never picks a single crop
MAX_CROPS = 6  # the official preprocessing's largest grid


def view_tokens(size: int) -> int:
    """Tokens of one square view of `size` px (a multiple of TOKEN_STRIDE): 768 -> 144, 1024 -> 256."""
    return (size // TOKEN_STRIDE) ** 2


GLOBAL_TOKENS = view_tokens(BASE_SIZE)  # 256
CROP_TOKENS = view_tokens(CROP_SIZE)  # 144
CROP_COUNTS = (0, *range(MIN_CROPS, MAX_CROPS + 1))  # the crop counts a page can get: 0, 2..6


def visual_tokens(crops: int) -> int:
    """Tokens the language model sees for a page shown with `crops` crops (0 or 2..6)."""
    return GLOBAL_TOKENS + CROP_TOKENS * crops


TOKEN_STEPS = tuple(visual_tokens(k) for k in CROP_COUNTS)  # 256, 544, 688, 832, 976, 1120
TOKEN_FLOOR = TOKEN_STEPS[0]  # 256: the global view alone
TOKEN_CEILING = TOKEN_STEPS[-1]  # 1120: the global view and 6 crops


def crops_allowed(max_visual_tokens: int) -> int:
    """The most crops a visual-token cap allows: 0, or 2..6 (a cap that fits one crop fits none)."""
    k = min((max_visual_tokens - GLOBAL_TOKENS) // CROP_TOKENS, MAX_CROPS)
    return k if k >= MIN_CROPS else 0


def crops_required(min_visual_tokens: int) -> int:
    """The fewest crops a visual-token floor demands: 0, or 2..6 (more than 6 when the floor is
    above TOKEN_CEILING, which no cap can then allow)."""
    if min_visual_tokens <= GLOBAL_TOKENS:
        return 0
    return max(MIN_CROPS, math.ceil((min_visual_tokens - GLOBAL_TOKENS) / CROP_TOKENS))


def token_budget_fits(min_visual_tokens: int, max_visual_tokens: int) -> bool:
    """Whether some crop count meets the floor without passing the cap (e.g. 600..650 does not:
    600 needs 3 crops, 650 allows 2)."""
    return crops_required(min_visual_tokens) <= crops_allowed(max_visual_tokens)
