"""Pages normalised on the device from uint8 are bit for bit what the image processor gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from ocr_server.engines.transformers.pixels import normalisation_table, normalise


def _page(seed: int, height: int, width: int) -> Image.Image:
    return Image.fromarray((np.random.RandomState(seed).rand(height, width, 3) * 255).astype("uint8"))


@pytest.mark.parametrize("crop", [True, False], ids=["global view and crops", "global view only"])
def test_device_normalisation_matches_the_processor_bit_for_bit(crop):
    # Imported here, not at the top: every xdist worker collects this module, and the processor's
    # import (transformers' lazy table) was 2.5 CPU s of each worker's collection.
    from transformers import DeepseekOcr2ImageProcessorPil

    processor = DeepseekOcr2ImageProcessorPil(size={"height": 1024, "width": 1024}, tile_size=640)
    table = normalisation_table(processor)
    kw = dict(crop_to_patches=crop, min_patches=2, max_patches=6, tile_size=640 if crop else 1024, return_tensors="pt")
    for page in (_page(0, 900, 1500), _page(1, 300, 200)):
        want = processor(page, **kw)
        raw = processor(page, do_rescale=False, do_normalize=False, **kw)
        for key in ("pixel_values", "pixel_values_local"):
            if key in want:
                assert raw[key].dtype == torch.uint8
                assert torch.equal(normalise(raw[key], table), want[key]), key


def test_normalise_refuses_pixels_that_are_not_uint8_pages():
    with pytest.raises(ValueError, match="uint8"):
        normalise(torch.zeros(1, 3, 4, 4), torch.zeros(3, 256))
