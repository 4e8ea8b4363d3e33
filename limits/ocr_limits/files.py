"""What a document is by its first bytes: one table of file signatures for the server and the worker.

The server sniffs an upload before decoding it, and the OcrBatch worker sniffs a document before
sending it: both read this table, so a format one accepts the other accepts too (they had
drifted: the server took GIF and BMP, the worker refused them). Pure data and functions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileFormat:
    name: str  # the format's name in messages and responses ("png", "pdf")
    content_type: str  # the media type a request with this document carries
    signatures: tuple[bytes, ...]  # prefixes that identify it
    multi_page: bool = False  # PDF and TIFF hold pages; an image is one page (an animation: its first frame)


# WebP is a RIFF container: "RIFF", 4 bytes of length, then "WEBP" (see sniff).
FORMATS: tuple[FileFormat, ...] = (
    FileFormat("png", "image/png", (b"\x89PNG\r\n\x1a\n",)),
    FileFormat("jpeg", "image/jpeg", (b"\xff\xd8\xff",)),
    FileFormat("webp", "image/webp", ()),
    FileFormat("tiff", "image/tiff", (b"II*\x00", b"MM\x00*"), multi_page=True),
    FileFormat("gif", "image/gif", (b"GIF87a", b"GIF89a")),
    FileFormat("bmp", "image/bmp", (b"BM",)),
    FileFormat("pdf", "application/pdf", (b"%PDF-",), multi_page=True),
)
BY_NAME = {f.name: f for f in FORMATS}
NAMES = tuple(f.name for f in FORMATS)
CONTENT_TYPES = {f.name: f.content_type for f in FORMATS}
SUPPORTED = "PNG, JPEG, WebP, TIFF, GIF, BMP, PDF"  # as messages name them
MARKUP_PREFIXES = (b"<svg", b"<?xml", b"<!doctype", b"<html")
# What the server reads of one request by default, so the batch worker refuses a page it would
# refuse before sending it: the bytes of a body (its MAX_BODY_BYTES) and the pixels of one decoded
# page (its max_image_pixels; Pillow's own bomb check stops at twice 89.5 Mpx).
MAX_BODY_BYTES = 20 * 1024 * 1024
MAX_PAGE_PIXELS = 64_000_000


def sniff(data: bytes) -> str | None:
    """The format's name from the first bytes, or None when no signature matches."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    for fmt in FORMATS:
        if data.startswith(fmt.signatures):
            return fmt.name
    return None


def looks_like_markup(data: bytes) -> bool:
    """SVG, XML or HTML text: refused with its own message (a vector page is not rendered)."""
    head = data[:512].lstrip().lower()
    return head.startswith(MARKUP_PREFIXES) or b"<svg" in head
