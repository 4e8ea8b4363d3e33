"""A document (image, multi-page TIFF or PDF) -> numbered RGB pages. Runs in a worker thread."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from PIL import Image

from ..runtime.errors import BadInput, PayloadTooLarge
from .images import decode_image_pages, select_pages, sniff_format


@dataclass(frozen=True)
class Page:
    number: int  # 1-based, as users count
    image: Image.Image


# The `pages` option is bounded before any number in it is listed: its size in bytes, the number of
# comma-separated parts, then the total of distinct pages, counted from the merged ranges.
MAX_PAGES_SPEC_BYTES = 1024
MAX_PAGE_RANGES = 256


def _no_check() -> None:
    """The default progress check: nothing stops the work (tests and tools call without a deadline)."""


def _parse_range(part: str, spec: str) -> tuple[int, int]:
    part = part.strip()
    try:
        if "-" in part:
            a, b = (int(x) for x in part.split("-", 1))
        else:
            a = b = int(part)
        if a > b:
            raise ValueError
    except ValueError:
        raise BadInput(f"pages={spec!r}: {part!r} is not a page number or range like 2-4", param="pages") from None
    return a, b


def count_pages(ranges: list[tuple[int, int]]) -> int:
    """Distinct pages covered by inclusive ranges, by arithmetic on the merged ranges (no list of pages)."""
    total, end = 0, None
    for a, b in sorted(ranges):
        if end is not None and a <= end:
            a = end + 1
        if a <= b:
            total += b - a + 1
        end = b if end is None else max(end, b)
    return total


def parse_pages(spec: str | None, *, max_pages: int) -> list[int] | None:
    """"1-3,5" -> [1, 2, 3, 5]; None -> all pages. Raises BadInput with the bad part named, and
    PayloadTooLarge (param pages) for a spec too long, with too many parts or selecting more than
    max_pages pages, all decided before any page number is listed."""
    if spec is None or str(spec).strip() == "":
        return None
    spec = str(spec)
    size = len(spec.encode())
    if size > MAX_PAGES_SPEC_BYTES:
        raise PayloadTooLarge(f"the pages option is {size} bytes; the limit is {MAX_PAGES_SPEC_BYTES}", param="pages")
    parts = spec.split(",")
    if len(parts) > MAX_PAGE_RANGES:
        raise PayloadTooLarge(f"the pages option has {len(parts)} ranges; the limit is {MAX_PAGE_RANGES}", param="pages")
    ranges = [_parse_range(part, spec) for part in parts]
    total = count_pages(ranges)
    if total > max_pages:
        raise PayloadTooLarge(f"the pages option selects {total} pages; the limit is {max_pages} per request", param="pages")
    return sorted({p for a, b in ranges for p in range(a, b + 1)})


def render_pdf(data: bytes, pages: list[int] | None, max_pages: int, dpi: int, max_pixels: int,
               check: Callable[[], None] = _no_check) -> list[Page]:
    """Render PDF pages with pypdfium2 at `dpi` (144 like the official scripts), bounded in pixels and
    pages (counted before any page is rendered); `check` runs before each page and may stop the work."""
    import pypdfium2 as pdfium

    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise BadInput(f"the PDF could not be opened: {exc}", param="file") from None
    try:
        n = len(pdf)
        if n == 0:
            raise BadInput("the PDF has no pages", param="file")
        out = []
        for index in select_pages(n, pages, max_pages):
            check()
            try:
                page = pdf[index]  # a page tree pdfium refuses (nested thousands deep, cyclic) fails here
                w_pt, h_pt = page.get_size()
            except pdfium.PdfiumError as exc:
                raise BadInput(f"page {index + 1} of the PDF could not be read: {exc}", param="file") from None
            scale = dpi / 72.0
            if w_pt * h_pt * scale * scale > max_pixels:  # giant page boxes would allocate gigabytes
                scale = (max_pixels / max(w_pt * h_pt, 1.0)) ** 0.5
            if w_pt * scale < 1 or h_pt * scale < 1:
                raise BadInput(f"page {index + 1} has zero size", param="file")
            try:
                bitmap = page.render(scale=scale)
            except pdfium.PdfiumError as exc:
                raise BadInput(f"page {index + 1} of the PDF could not be rendered: {exc}", param="file") from None
            out.append(Page(index + 1, bitmap.to_pil().convert("RGB")))
        return out
    finally:
        pdf.close()


def load_document(data: bytes, *, pages: list[int] | None, max_pages: int, pdf_dpi: int, max_pixels: int,
                  check: Callable[[], None] = _no_check) -> tuple[str, list[Page]]:
    """Sniff, decode and number the pages of one uploaded document; `check` runs between pages
    (the request's deadline) and raises to stop reading."""
    fmt = sniff_format(data)
    if fmt == "pdf":
        return fmt, render_pdf(data, pages, max_pages, pdf_dpi, max_pixels, check)
    images = decode_image_pages(data, fmt, max_pixels, pages, max_pages, check)
    numbers = pages if pages is not None else list(range(1, len(images) + 1))
    if len(numbers) != len(images):
        raise PayloadTooLarge("page selection mismatch", param="pages")
    return fmt, [Page(n, im) for n, im in zip(numbers, images)]
