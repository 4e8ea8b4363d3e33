"""A document (image, multi-page TIFF or PDF) -> numbered RGB pages. Runs in a worker thread."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from .errors import BadInput, PayloadTooLarge
from .images import decode_image_pages, select_pages, sniff_format


@dataclass(frozen=True)
class Page:
    number: int  # 1-based, as users count
    image: Image.Image


def parse_pages(spec: str | None) -> list[int] | None:
    """"1-3,5" -> [1, 2, 3, 5]; None -> all pages. Raises BadInput with the bad part named."""
    if spec is None or str(spec).strip() == "":
        return None
    out: list[int] = []
    for part in str(spec).split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if a > b or b - a > 10_000:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise BadInput(f"pages={spec!r}: {part!r} is not a page number or range like 2-4", param="pages") from None
    return sorted(set(out))


def render_pdf(data: bytes, pages: list[int] | None, max_pages: int, dpi: int, max_pixels: int) -> list[Page]:
    """Render PDF pages with pypdfium2 at `dpi` (144 like the official scripts), bounded in pixels."""
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
            page = pdf[index]
            w_pt, h_pt = page.get_size()
            scale = dpi / 72.0
            if w_pt * h_pt * scale * scale > max_pixels:  # giant page boxes would allocate gigabytes
                scale = (max_pixels / max(w_pt * h_pt, 1.0)) ** 0.5
            if w_pt * scale < 1 or h_pt * scale < 1:
                raise BadInput(f"page {index + 1} has zero size", param="file")
            bitmap = page.render(scale=scale)
            out.append(Page(index + 1, bitmap.to_pil().convert("RGB")))
        return out
    finally:
        pdf.close()


def load_document(data: bytes, *, pages: list[int] | None, max_pages: int, pdf_dpi: int, max_pixels: int) -> tuple[str, list[Page]]:
    """Sniff, decode and number the pages of one uploaded document."""
    fmt = sniff_format(data)
    if fmt == "pdf":
        return fmt, render_pdf(data, pages, max_pages, pdf_dpi, max_pixels)
    images = decode_image_pages(data, fmt, max_pixels, pages, max_pages)
    numbers = pages if pages is not None else list(range(1, len(images) + 1))
    if len(numbers) != len(images):
        raise PayloadTooLarge("page selection mismatch", param="pages")
    return fmt, [Page(n, im) for n, im in zip(numbers, images)]
