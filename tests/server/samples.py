"""Documents users send, built in memory (no binary fixtures in the repo)."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
from PIL import Image


def page(width: int, height: int, seed: int = 0) -> Image.Image:
    """A white page with dark text-like bars: deterministic, compressible."""
    rng = np.random.default_rng(seed)
    arr = np.full((height, width, 3), 255, dtype=np.uint8)
    for y in range(8, max(height - 8, 9), 24):
        x2 = int(rng.integers(width // 3, width))
        arr[y:y + 8, 8:x2] = 30
    return Image.fromarray(arr)


def encode(img: Image.Image, fmt: str = "PNG", **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kw)
    return buf.getvalue()


def png(width: int, height: int, seed: int = 0) -> bytes:
    return encode(page(width, height, seed))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A valid PNG header declaring a huge image, with a tiny compressed body."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1024)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def cmyk_jpeg() -> bytes:
    return encode(page(300, 200).convert("CMYK"), "JPEG")


def png16_gray() -> bytes:
    arr = (np.linspace(0, 65535, 200 * 100).reshape(100, 200)).astype(np.uint16)
    return encode(Image.fromarray(arr).convert("I;16") if Image.fromarray(arr).mode != "I;16" else Image.fromarray(arr))


def gray_png() -> bytes:
    return encode(page(200, 100).convert("L"))


def animated_gif() -> bytes:
    frames = [page(120, 80, s).convert("P") for s in range(3)]
    return encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)


def exif_rotated_jpeg(width: int = 1600, height: int = 800) -> bytes:
    """Stored landscape (width x height) with EXIF Orientation 6: upright it is height x width."""
    img = page(width, height)
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(img, "JPEG", exif=exif.tobytes())


def multipage_tiff(n: int) -> bytes:
    frames = [page(200, 150, s) for s in range(n)]
    return encode(frames[0], "TIFF", save_all=True, append_images=frames[1:])


def pdf(pages: int, width_pt: float = 200, height_pt: float = 150) -> bytes:
    return pdf_of_sizes([(width_pt, height_pt)] * pages)


def pdf_of_sizes(sizes: list[tuple[float, float]]) -> bytes:
    """A blank page of each (width, height) in points: pages of different sizes are different
    requests (no result-cache hit)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument.new()
    for width_pt, height_pt in sizes:
        doc.new_page(width_pt, height_pt)
    buf = io.BytesIO()
    doc.save(buf)
    return buf.getvalue()


def empty_pdf() -> bytes:
    """A well-formed PDF whose page tree is empty (pdfium cannot write one)."""
    return _pdf_of([b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"])


def tiff_frames(n: int) -> bytes:
    """A little-endian TIFF of `n` 1x1 grey pages sharing one pixel, built by hand: Pillow takes
    minutes to write thousands of frames, and this is how a hostile one looks (102 bytes a page)."""
    entries = [(256, 3, 1, 1), (257, 3, 1, 1), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, 1, 8), (278, 3, 1, 1), (279, 4, 1, 1)]  # 1x1, 8-bit, uncompressed, pixel at offset 8
    size = 2 + 12 * len(entries) + 4
    out = [b"II*\x00" + struct.pack("<I", 9) + b"\xff"]
    body = struct.pack("<H", len(entries)) + b"".join(struct.pack("<HHII", *e) for e in entries)
    for i in range(n):
        out.append(body + struct.pack("<I", 9 + size * (i + 1) if i + 1 < n else 0))
    return b"".join(out)


def _pdf_of(objects: list[bytes]) -> bytes:
    """A PDF of these object bodies (numbered from 1, object 1 the catalog) with a correct xref."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def pdf_deep_page_tree(depth: int) -> bytes:
    """One page under `depth` nested /Pages nodes, built by hand (a writer would flatten it)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    for level in range(depth):
        number = level + 2
        parent = b" /Parent %d 0 R" % (number - 1) if level else b""
        objects.append(b"<< /Type /Pages /Kids [%d 0 R] /Count 1%s >>" % (number + 1, parent))
    objects.append(b"<< /Type /Page /MediaBox [0 0 200 150] /Parent %d 0 R >>" % (depth + 1))
    return _pdf_of(objects)


def pdf_deep_objects(depth: int) -> bytes:
    """A one-page PDF whose resources are `depth` nested dictionaries and whose annotations are
    `depth` nested arrays: a parser that recurses without a bound overflows its stack."""
    return _pdf_of([
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /MediaBox [0 0 200 150] /Parent 2 0 R /Resources 4 0 R /Annots 5 0 R >>",
        b"<< /A " * depth + b"1" + b" >>" * depth,
        b"[" * depth + b"]" * depth,
    ])
