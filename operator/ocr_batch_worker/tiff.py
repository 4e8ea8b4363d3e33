"""A multi-page TIFF cut into one-page TIFFs, as a PDF is cut into one-page PDFs (documents.py).

Each request then carries one page, not the whole file again for every page. Pages are counted
from the TIFF's directories without decoding a pixel; a page is decoded only when its request is
sent, one page at a time in the whole worker (a lock), so the worker holds at most one decoded
page whatever its concurrency: at most MAX_PAGE_PIXELS x 4 bytes. Each page's size is read from
its header before it is decoded: a page the server would refuse (more pixels than it reads) fails
alone, with its size in the reason, and a header declaring a decompression bomb never allocates.

A one-page TIFF is sent as it is (its own compression, no decode), after the same header check.
The pixels are kept: a page is written back losslessly (Group 4 for 1-bit scans, Deflate
otherwise) after turning it upright by its Orientation tag, which a re-written page would lose.
"""

from __future__ import annotations

import io
import threading
import warnings

from ocr_limits.files import MAX_PAGE_PIXELS

from .failures import DocumentError

# Pillow decodes one page at a time in the worker: its memory is bounded by one page, not by
# concurrencyPerWorker pages.
_DECODE = threading.Lock()
ORIENTATION = 0x0112  # the EXIF/TIFF Orientation tag


def _open(data: bytes):
    """The TIFF opened (its first directory read, no pixel decoded), or DocumentError."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below, by our own bound
            return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise DocumentError(f"the TIFF declares a decompression bomb: {exc}") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as exc:
        raise DocumentError(f"the TIFF could not be opened: {exc}") from None


def check_size(page: int, size: tuple[int, int], max_pixels: int = MAX_PAGE_PIXELS) -> None:
    """A page larger than the server reads (or of zero size) fails before it is decoded or sent."""
    w, h = size
    if w <= 0 or h <= 0:
        raise DocumentError(f"page {page} of the TIFF has zero size ({w}x{h})")
    if w * h > max_pixels:
        raise DocumentError(f"page {page} of the TIFF is {w}x{h} = {w * h} pixels; the OcrService reads at "
                            f"most {max_pixels} pixels per page")


class TiffPages:
    """An open TIFF (its pages counted, at most max_pages) that cuts out one page at a time."""

    def __init__(self, data: bytes, max_pages: int) -> None:
        self._data = data
        self._img = _open(data)
        self._lock = threading.Lock()
        n = 1
        try:
            while n <= max_pages:  # one directory more than allowed tells "too many"
                try:
                    self._img.seek(n)
                except EOFError:
                    break
                n += 1
        except (OSError, ValueError, SyntaxError) as exc:
            self.close()
            raise DocumentError(f"page {n + 1} of the TIFF could not be read: {exc}") from None
        if n > max_pages:
            self.close()
            raise DocumentError(f"the TIFF has more than {max_pages} pages; the limit is {max_pages} "
                                "(spec.limits.maxPagesPerDocument)")
        self.count = n

    def first_size(self) -> tuple[int, int]:
        with self._lock:
            self._img.seek(0)
            return self._img.size

    def page(self, number: int, max_pixels: int = MAX_PAGE_PIXELS) -> bytes:
        """Page `number` (1-based) as a one-page TIFF; DocumentError for this page alone."""
        from PIL import Image, ImageOps

        with self._lock, _DECODE:
            try:
                self._img.seek(number - 1)
                check_size(number, self._img.size, max_pixels)
                self._img.load()
                # exif_transpose copies a page even when it needs no turn: only a turned page is copied.
                turned = self._img.getexif().get(ORIENTATION, 1) not in (None, 1)
                upright = ImageOps.exif_transpose(self._img) if turned else self._img
                buf = io.BytesIO()
                compression = "group4" if upright.mode == "1" else "tiff_adobe_deflate"
                upright.save(buf, "TIFF", compression=compression)
            except DocumentError:
                raise
            except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError, MemoryError) as exc:
                raise DocumentError(f"page {number} of the TIFF could not be read: {exc}") from None
        return buf.getvalue()

    def close(self) -> None:
        with self._lock:
            self._img.close()
