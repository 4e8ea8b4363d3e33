"""Grounded model output -> clean markdown and blocks with pixel boxes; a split part's boxes -> the page's.

The model writes `<|ref|>LABEL<|/ref|><|det|>[[x1, y1, x2, y2], ...]<|/det|>` before each block,
coordinates normalised to 0..999. Output of a random (tiny) model is arbitrary, so every step here
tolerates garbage: unmatched tags are dropped, unparsable boxes are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_BLOCK = re.compile(r"<\|ref\|>(.*?)<\|/ref\|>\s*<\|det\|>(.*?)<\|/det\|>", re.S)
_BOX = re.compile(r"\[\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*,\s*(-?\d+(?:\.\d+)?)\s*\]")
_STRAY = re.compile(r"<\|/?(?:ref|det|grounding)\|>")
_SPECIAL = ("<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜▁pad▁｜>")
NORM = 999.0  # the model's box coordinates are 0..999 of the image it saw
Box = tuple[int, int, int, int]  # x1, y1, x2, y2 in page pixels, x2/y2 exclusive


@dataclass
class Block:
    label: str
    boxes: list[list[int]]  # [x1, y1, x2, y2] in image pixels
    text: str
    page: int = 1


@dataclass
class Parsed:
    text: str
    raw: str
    blocks: list[Block] = field(default_factory=list)


def strip_special(raw: str) -> str:
    for tok in _SPECIAL:
        raw = raw.replace(tok, "")
    return raw


def _boxes(spec: str, width: int, height: int) -> list[list[int]]:
    out = []
    for m in _BOX.finditer(spec):
        x1, y1, x2, y2 = (min(max(float(v), 0.0), NORM) for v in m.groups())
        x1, x2 = sorted((x1, x2))
        y1, y2 = sorted((y1, y2))
        out.append([round(x1 / NORM * width), round(y1 / NORM * height), round(x2 / NORM * width), round(y2 / NORM * height)])
    return out


def parse_output(raw: str, width: int, height: int, page: int = 1) -> Parsed:
    """Split grounded output into blocks; `text` is markdown without grounding tags."""
    raw = strip_special(raw)
    blocks: list[Block] = []
    pieces: list[str] = []
    matches = list(_BLOCK.finditer(raw))
    if matches and matches[0].start() > 0:
        pieces.append(raw[: matches[0].start()])
    image_no = 0
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(raw)
        label = _STRAY.sub("", m.group(1)).strip()
        content = _STRAY.sub("", raw[m.end():end]).strip("\n")
        boxes = _boxes(m.group(2), width, height)
        if label == "image":
            content = f"![](image-{page}-{image_no})"
            image_no += 1
        blocks.append(Block(label=label, boxes=boxes, text=content.strip(), page=page))
        pieces.append(content + ("\n" if not content.endswith("\n") else ""))
    if not matches:
        pieces.append(raw)
    text = _STRAY.sub("", "".join(pieces)).strip()
    return Parsed(text=text, raw=raw, blocks=blocks)


_DET = re.compile(r"(<\|det\|>)(.*?)(<\|/det\|>)", re.S)


def rebase_grounding(raw: str, box: Box, page_size: tuple[int, int]) -> str:
    """Rewrite the 0..999 boxes a part's output holds so they are 0..999 of the whole page."""
    x0, y0, x1, y1 = box
    pw, ph = x1 - x0, y1 - y0
    width, height = page_size

    def one(m: re.Match) -> str:
        vals = [min(max(float(v), 0.0), NORM) for v in m.groups()]
        xs = [round((v / NORM * pw + x0) / width * NORM) for v in vals[0::2]]
        ys = [round((v / NORM * ph + y0) / height * NORM) for v in vals[1::2]]
        return f"[{xs[0]}, {ys[0]}, {xs[1]}, {ys[1]}]"

    return _DET.sub(lambda m: m.group(1) + _BOX.sub(one, m.group(2)) + m.group(3), raw)
