"""Bytes -> upright RGB pages, safely (the crop plan of a page is the engines', engines/crops.py).

Nothing here trusts the client: the format is sniffed from magic bytes (ocr_limits.files), the declared pixel count
is checked from the header before any pixel is decoded (decompression bombs), truncated files are
errors (never silently padded), EXIF rotation is applied before cropping, and every mode (CMYK,
16-bit, palette, alpha, grayscale) becomes 8-bit RGB. PDF pages are rendered by documents.py.
"""

from __future__ import annotations

import io
import warnings
from typing import Callable

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from ocr_limits.files import SUPPORTED, looks_like_markup, sniff

from ..runtime.errors import BadInput, PayloadTooLarge, UnsupportedMedia

ImageFile.LOAD_TRUNCATED_IMAGES = False  # a truncated upload is an error, not a grey half-page

# The highest TIFF page read. A TIFF's pages are found by walking a chain of directories (Pillow's
# own count is quadratic in them): a 6 MB file of 60,000 empty pages took 30 s to count.
MAX_TIFF_FRAMES = 1000


def sniff_format(data: bytes) -> str:
    """The document format from its first bytes; raises for empty, SVG/HTML/text and unknown data."""
    if not data:
        raise BadInput("the body is empty (zero bytes); send an image or PDF", param="file")
    fmt = sniff(data)
    if fmt is not None:
        return fmt
    if looks_like_markup(data):
        raise UnsupportedMedia(f"SVG, XML and HTML documents are not supported; send one of {SUPPORTED}", param="file")
    raise UnsupportedMedia(f"the data is not a supported image or document; send one of {SUPPORTED}", param="file")


def _to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode -> 8-bit RGB; alpha is composited on white (a page's background)."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):
        arr = np.asarray(img, dtype=np.float64)
        hi = 65535.0 if img.mode.startswith("I;16") or arr.max(initial=0) > 255 else 255.0
        img = Image.fromarray(np.clip(arr / hi * 255.0 + 0.5, 0, 255).astype(np.uint8), "L")
    elif img.mode == "F":
        arr = np.asarray(img, dtype=np.float64)
        lo, hi = float(arr.min(initial=0)), float(arr.max(initial=1))
        scale = 255.0 / (hi - lo) if hi > lo else 0.0
        img = Image.fromarray(((arr - lo) * scale).astype(np.uint8), "L")
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        img = Image.alpha_composite(background, rgba)
    return img if img.mode == "RGB" else img.convert("RGB")


def _open_checked(data: bytes, max_pixels: int) -> Image.Image:
    Image.MAX_IMAGE_PIXELS = max_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data))
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise PayloadTooLarge(f"the image declares more than {max_pixels} pixels", param="file") from None
    except UnidentifiedImageError:
        raise BadInput("the image could not be decoded (corrupt or not an image)", param="file") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadInput(f"the image could not be decoded: {exc}", param="file") from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise BadInput(f"the image has zero size ({w}x{h})", param="file")
    if w * h > max_pixels:
        raise PayloadTooLarge(f"the image is {w}x{h} = {w * h} pixels; the limit is {max_pixels}", param="file")
    return img


def _decode_frame(img: Image.Image) -> Image.Image:
    try:
        img.load()
        upright = ImageOps.exif_transpose(img)  # phone photos: turn upright before cropping
        return _to_rgb(upright)
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise BadInput(f"the image is truncated or corrupt: {exc}", param="file") from None


def count_tiff_frames(img: Image.Image, upto: int, check: Callable[[], None]) -> int:
    """Pages of a TIFF, counting no further than `upto`: each step reads one more directory."""
    n = 1
    while n < upto:
        check()
        try:
            img.seek(n)
        except EOFError:
            break
        except (OSError, SyntaxError, ValueError) as exc:
            raise BadInput(f"page {n + 1} of the TIFF could not be read: {exc}", param="file") from None
        n += 1
    return n


def decode_image_pages(data: bytes, fmt: str, max_pixels: int, pages: list[int] | None, max_pages: int,
                       check: Callable[[], None] = lambda: None) -> list[Image.Image]:
    """Decode a raster document. TIFF yields each page; GIF/WebP animations yield the first frame."""
    img = _open_checked(data, max_pixels)
    n_frames = 1
    if fmt == "tiff":
        need = max(pages) if pages else max_pages + 1  # one more than allowed tells "too many"
        if pages and need > MAX_TIFF_FRAMES:
            raise PayloadTooLarge(f"page {need} requested; pages of a TIFF beyond {MAX_TIFF_FRAMES} are not read",
                                  param="pages")
        n_frames = count_tiff_frames(img, need, check)
        if pages is None and n_frames > max_pages:
            raise PayloadTooLarge(f"the document has more than {max_pages} pages; the limit is {max_pages} per request "
                                  f"(select pages with the 'pages' option, e.g. \"1-{max_pages}\")", param="pages")
    wanted = select_pages(n_frames, pages, max_pages)
    out = []
    for index in wanted:
        check()
        try:
            img.seek(index)
        except EOFError:
            raise BadInput(f"page {index + 1} could not be read", param="pages") from None
        w, h = img.size
        if w * h > max_pixels:
            raise PayloadTooLarge(f"page {index + 1} is {w}x{h}; the limit is {max_pixels} pixels", param="file")
        out.append(_decode_frame(img))
    return out


def select_pages(n_pages: int, pages: list[int] | None, max_pages: int) -> list[int]:
    """0-based page indices to process: the requested ones (1-based input), bounded by max_pages."""
    if pages is None:
        if n_pages > max_pages:
            raise PayloadTooLarge(
                f"the document has {n_pages} pages; the limit is {max_pages} per request "
                f"(select pages with the 'pages' option, e.g. \"1-{max_pages}\")",
                param="pages",
            )
        return list(range(n_pages))
    bad = [p for p in pages if p < 1 or p > n_pages]
    if bad:
        raise BadInput(f"pages {bad} do not exist; the document has {n_pages} page(s)", param="pages")
    if len(pages) > max_pages:
        raise PayloadTooLarge(f"{len(pages)} pages requested; the limit is {max_pages} per request", param="pages")
    return [p - 1 for p in pages]
