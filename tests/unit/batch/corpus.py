"""Bad documents, made for real: what a document archive holds that nobody looked at.

Each is a real file of its format, built byte by byte where Pillow would refuse to write it (a
header declaring a decompression bomb), so the worker meets exactly what a user's file gives it.
"""

from __future__ import annotations

import io
import json
import struct
import zlib

from PIL import Image

CHAT = "/v1/chat/completions"


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height (a bomb when large) with one tiny IDAT."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def tiff_header_only(width: int, height: int) -> bytes:
    """A one-page little-endian TIFF whose directory declares width x height, with 8 bytes of strip."""
    entries = [(256, 4, 1, width), (257, 4, 1, height), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1),
               (273, 4, 1, 0), (277, 3, 1, 1), (278, 4, 1, height), (279, 4, 1, 8)]
    ifd_offset = 8
    strip_offset = ifd_offset + 2 + 12 * len(entries) + 4
    out = bytearray(b"II*\x00" + struct.pack("<I", ifd_offset) + struct.pack("<H", len(entries)))
    for tag, typ, count, value in entries:
        if tag == 273:
            value = strip_offset
        packed = struct.pack("<H", value) + b"\0\0" if typ == 3 else struct.pack("<I", value)
        out += struct.pack("<HHI", tag, typ, count) + packed
    out += struct.pack("<I", 0) + b"\0" * 8
    return bytes(out)


def image(fmt: str, size: tuple[int, int] = (40, 30), frames: int = 1, mode: str = "RGB") -> bytes:
    imgs = [Image.new(mode, size, (i * 40 % 256, 0, 0) if mode == "RGB" else 1) for i in range(frames)]
    buf = io.BytesIO()
    imgs[0].save(buf, fmt, save_all=frames > 1, append_images=imgs[1:])
    return buf.getvalue()


def chat_line(custom_id: str, **over) -> str:
    item = {"custom_id": custom_id, "method": "POST", "url": CHAT,
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    item.update(over)
    return json.dumps(item)


def deep_line(custom_id: str, depth: int = 1100) -> str:
    """An OpenAI batch line whose body nests `depth` lists deep (past the worker's bound; at 1,100, json.loads raises RecursionError under the default recursion limit)."""
    return ('{"custom_id": "%s", "method": "POST", "url": "%s", "body": {"model": "m", "x": %s%s}}'
            % (custom_id, CHAT, "[" * depth, "]" * depth))


# How a header declaring a decompression bomb is refused: Pillow's own error at open, or, where
# Pillow's process-wide MAX_IMAGE_PIXELS was raised (the server sets it per request, and tests
# run both in one process), the worker's page bound on the size Pillow read. Either refuses the
# document before anything is sent.
BOMB_REFUSAL = r"declares a decompression bomb|pixels; the OcrService reads at most"
