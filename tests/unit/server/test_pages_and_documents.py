"""The `pages` option and documents with many pages are bounded before any work is done on them."""

from __future__ import annotations

import time

import pytest

from ocr_server.serving.documents import MAX_PAGE_RANGES, MAX_PAGES_SPEC_BYTES, load_document, parse_pages
from ocr_server.runtime.errors import BadInput, DeadlineExceeded, PayloadTooLarge
from ocr_server.serving.images import MAX_TIFF_FRAMES
from tests.server import samples


def test_pages_longer_than_the_byte_limit_are_refused_naming_the_parameter():
    spec = "1-2," * (MAX_PAGES_SPEC_BYTES // 4) + "1"
    with pytest.raises(PayloadTooLarge, match="pages") as err:
        parse_pages(spec, max_pages=8)
    assert err.value.param == "pages" and len(err.value.message) < 300


def test_pages_with_too_many_ranges_are_refused():
    spec = ",".join(["1"] * (MAX_PAGE_RANGES + 1))
    assert len(spec.encode()) <= MAX_PAGES_SPEC_BYTES
    with pytest.raises(PayloadTooLarge, match="ranges") as err:
        parse_pages(spec, max_pages=8)
    assert err.value.param == "pages"


def test_the_page_total_is_counted_before_any_page_number_is_listed():
    """Ten ranges of 10,000 pages each: refused by arithmetic, quickly, without a 100,000-item list."""
    spec = ",".join(f"{i * 10_000 + 1}-{(i + 1) * 10_000}" for i in range(10))
    t0 = time.monotonic()
    with pytest.raises(PayloadTooLarge, match="100000 pages") as err:
        parse_pages(spec, max_pages=8)
    assert err.value.param == "pages" and time.monotonic() - t0 < 0.05


def test_overlapping_ranges_count_each_page_once():
    assert parse_pages("1-3,2-4,3", max_pages=4) == [1, 2, 3, 4]
    with pytest.raises(PayloadTooLarge):
        parse_pages("1-3,2-5", max_pages=4)


def test_a_range_of_huge_page_numbers_is_refused_by_arithmetic():
    with pytest.raises(PayloadTooLarge, match="selects"):
        parse_pages("1-" + "9" * 1000, max_pages=8)
    with pytest.raises(BadInput):
        parse_pages("9" * 1000 + "-1", max_pages=8)
    with pytest.raises(BadInput):
        parse_pages("5-2", max_pages=8)


def test_a_tiff_with_ten_thousand_pages_is_refused_without_walking_them_all():
    data = samples.tiff_frames(10_000)
    t0 = time.monotonic()
    with pytest.raises(PayloadTooLarge, match="more than 8 pages"):
        load_document(data, pages=None, max_pages=8, pdf_dpi=144, max_pixels=10**7)
    assert time.monotonic() - t0 < 0.5


def test_a_tiff_page_beyond_the_frame_limit_is_refused_naming_the_parameter():
    data = samples.tiff_frames(MAX_TIFF_FRAMES + 2)
    t0 = time.monotonic()
    with pytest.raises(PayloadTooLarge, match=f"beyond {MAX_TIFF_FRAMES}") as err:
        load_document(data, pages=[MAX_TIFF_FRAMES + 1], max_pages=8, pdf_dpi=144, max_pixels=10**7)
    assert err.value.param == "pages" and time.monotonic() - t0 < 0.5


def test_a_tiff_page_within_the_limit_is_read():
    _, pages = load_document(samples.tiff_frames(50), pages=[50], max_pages=8, pdf_dpi=144, max_pixels=10**7)
    assert [p.number for p in pages] == [50] and pages[0].image.size == (1, 1)


def test_a_pdf_with_ten_thousand_pages_is_refused_before_rendering():
    data = samples.pdf(10_000, 10, 10)
    t0 = time.monotonic()
    with pytest.raises(PayloadTooLarge, match="10000 pages"):
        load_document(data, pages=None, max_pages=8, pdf_dpi=144, max_pixels=10**7)
    assert time.monotonic() - t0 < 1.0


def test_reading_a_document_stops_at_the_check_between_pages():
    """The deadline check runs between pages: a request past its deadline stops reading its document."""
    calls = []

    def check() -> None:
        calls.append(1)
        if len(calls) > 2:
            raise DeadlineExceeded("past the deadline")

    with pytest.raises(DeadlineExceeded):
        load_document(samples.pdf(6), pages=None, max_pages=8, pdf_dpi=144, max_pixels=10**7, check=check)
    with pytest.raises(DeadlineExceeded):
        load_document(samples.tiff_frames(6), pages=None, max_pages=8, pdf_dpi=144, max_pixels=10**7, check=check)
