"""Sniffing, safe decoding and the crop plan."""

from __future__ import annotations

import pytest

from ocr_server.runtime.errors import BadInput, PayloadTooLarge, UnsupportedMedia
from ocr_server.serving.documents import load_document, parse_pages
from ocr_server.engines.crops import plan_crops
from ocr_server.serving.images import sniff_format
from tests.server import samples


@pytest.mark.parametrize("data,fmt", [(samples.png(4, 4), "png"), (samples.cmyk_jpeg(), "jpeg"), (samples.animated_gif(), "gif"),
                                      (samples.multipage_tiff(2), "tiff"), (samples.pdf(1), "pdf"),
                                      (samples.encode(samples.page(8, 8), "WEBP"), "webp")])
def test_formats_are_sniffed_from_magic_bytes(data, fmt):
    assert sniff_format(data) == fmt


@pytest.mark.parametrize("data,exc", [(b"", BadInput), (b"<svg></svg>", UnsupportedMedia), (b"<html>", UnsupportedMedia),
                                      (b"just text", UnsupportedMedia)])
def test_non_images_are_refused(data, exc):
    with pytest.raises(exc):
        sniff_format(data)


def test_bomb_is_refused_from_the_header():
    with pytest.raises(PayloadTooLarge):
        load_document(samples.png_bomb(), pages=None, max_pages=4, pdf_dpi=144, max_pixels=10_000_000)


def test_sixteen_bit_png_keeps_its_range():
    _, pages = load_document(samples.png16_gray(), pages=None, max_pages=4, pdf_dpi=144, max_pixels=10**8)
    assert pages[0].image.mode == "RGB" and pages[0].image.getextrema()[0] == (0, 255)


def test_pages_spec_is_parsed():
    assert parse_pages("1-3,5, 3", max_pages=8) == [1, 2, 3, 5] and parse_pages(None, max_pages=8) is None
    with pytest.raises(BadInput):
        parse_pages("two", max_pages=8)


@pytest.mark.parametrize("w,h,grid", [
    (768, 768, (0, 0)), (700, 500, (0, 0)), (2000, 1000, (2, 1)), (1000, 2000, (1, 2)),
    (3000, 1000, (3, 1)), (1600, 1600, (2, 2)), (6000, 1000, (5, 1)),
], ids=["exactly 768", "small", "wide", "tall", "3:1", "square", "very wide capped at 5"])
def test_crop_plan_follows_the_official_rule(w, h, grid):
    plan = plan_crops(w, h, crop_size=768, base_size=1024, min_crops=2, max_crops=5)
    assert (plan.cols, plan.rows) == grid
    assert plan.visual_tokens == 256 + 144 * grid[0] * grid[1]


def test_low_cap_means_global_view_only():
    assert plan_crops(3000, 1000, crop_size=768, base_size=1024, min_crops=0, max_crops=0).crops == 0
