"""The global view as the model's reference preprocessing makes it (PIL's ImageOps.pad), whatever
the margin's parity: engines/transformers/global_view.py."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image, ImageOps

from ocr_server.engines.transformers.global_view import image_processor, pad_offset, pad_to_square
from tests.server import samples

BASE, TILE = 1024, 768
GREY = (127, 127, 127)  # the processor's background: int(0.5 * 255) per channel, as ImageOps.pad is given


def reference(page: Image.Image) -> np.ndarray:
    """DeepSeek-OCR 2's (and vLLM's) global view, channels first, uint8."""
    return np.asarray(ImageOps.pad(page, (BASE, BASE), color=GREY)).transpose(2, 0, 1)


@pytest.mark.parametrize("margin,offset", [(171, 86), (293, 146), (170, 85), (0, 0), (1, 0), (3, 2)])
def test_the_page_goes_where_imageops_pad_puts_it(margin, offset):
    assert pad_offset(margin) == offset


def test_a_tall_page_is_padded_left_and_right_and_a_wide_one_above_and_below():
    tall, wide = np.ones((3, 4, 1), np.uint8), np.ones((3, 1, 4), np.uint8)
    assert pad_to_square(tall, 0)[0].tolist() == [[0, 0, 1, 0]] * 4  # margin 3: at round(1.5) = 2
    assert pad_to_square(wide, 7)[:, :, 0].tolist() == [[7, 7, 1, 7]] * 3


@pytest.mark.parametrize("size", [(600, 500), (1000, 1400), (500, 600), (1600, 900), (700, 700), (2000, 1000)])
def test_the_processors_global_view_is_the_reference_preprocessings_to_the_pixel(size):
    page = samples.page(*size, seed=3)
    out = image_processor(BASE, TILE)(page, crop_to_patches=False, tile_size=BASE, do_rescale=False,
                                      do_normalize=False, return_tensors="np")
    assert np.array_equal(np.asarray(out["pixel_values"][0], dtype=np.uint8), reference(page))


def test_transformers_own_processor_is_a_row_off_where_the_margins_half_rounds_up():
    """Why the module exists: 600x500 leaves 171 rows, transformers pastes at 85, PIL at 86."""
    from transformers import DeepseekOcr2ImageProcessorPil

    page = samples.page(600, 500, seed=3)
    out = DeepseekOcr2ImageProcessorPil(size={"height": BASE, "width": BASE}, tile_size=TILE)(
        page, crop_to_patches=False, tile_size=BASE, do_rescale=False, do_normalize=False, return_tensors="np")
    theirs = np.asarray(out["pixel_values"][0], dtype=np.uint8)
    assert not np.array_equal(theirs, reference(page))
    assert np.array_equal(theirs[:, 85:938], reference(page)[:, 86:939])
