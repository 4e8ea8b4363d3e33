"""Pages the crop grid cannot show well: when to cut them into overlapping parts, and how to merge.

The model sees a page as a 1024 global view plus a grid of at most 6 crops of 768 (engines/crops.py).
Two things go wrong on long or huge pages, and both can be computed from the page size alone:
- aspect: the grid's aspect ratio is at most 6:1 and the page is resized to the grid without
  keeping its aspect ratio, so a receipt or a scroll is squeezed (`distortion` > MAX_DISTORTION);
- density: a big scan (a newspaper) is shrunk until its text is a few pixels high
  (`downscale` > the configured limit, 2.0 by default).
Such a page is cut along its long side into overlapping bands (tall page: top to bottom; wide
page: left to right), each band is OCRed as a page of its own (all in one batch), and the texts
are merged in that order with the overlap kept once. Everything here is pure.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal, Sequence

from ..engines.crops import plan_crops
from .grounding import Box

MAX_DISTORTION = 1.5  # page aspect / grid aspect beyond which text is visibly squeezed



@dataclass(frozen=True)
class ViewFit:
    downscale: float  # how much the page's text shrinks on its way to the model (1 = native)
    distortion: float  # how much more one axis shrinks than the other (1 = aspect kept)


@dataclass(frozen=True)
class SplitPlan:
    reason: Literal["aspect", "density"]
    boxes: tuple[Box, ...]  # in reading order
    overlap: int  # pixels shared by neighbouring parts


def view_fit(width: int, height: int, *, crop_size: int, base_size: int, min_crops: int, max_crops: int) -> ViewFit:
    """Downscale and distortion of the view the model would get of a width x height page."""
    plan = plan_crops(width, height, crop_size=crop_size, base_size=base_size, min_crops=min_crops, max_crops=max_crops)
    if not plan.crops:  # global view only: an aspect-keeping letterbox
        return ViewFit(max(width, height) / base_size, 1.0)
    sx, sy = width / (plan.cols * crop_size), height / (plan.rows * crop_size)
    return ViewFit(max(sx, sy), max(sx, sy) / min(sx, sy))


def _bands(length: int, n: int, overlap: float) -> tuple[list[tuple[int, int]], int]:
    """n intervals covering 0..length, each sharing `overlap` of its own length with the next."""
    part = math.ceil(length / (n - (n - 1) * overlap))
    ov = round(part * overlap)
    step = part - ov
    starts = [min(i * step, length - part) for i in range(n)]
    return [(s, min(s + part, length)) for s in starts], ov


def plan_split(width: int, height: int, *, crop_size: int, base_size: int, min_crops: int, max_crops: int,
               max_downscale: float, overlap: float, max_parts: int) -> SplitPlan | None:
    """None when the page fits the grid; else the fewest overlapping bands that each fit it.

    With no count up to max_parts that fits, max_parts bands (the best this option can do).
    """
    def fit(w: int, h: int) -> ViewFit:
        return view_fit(w, h, crop_size=crop_size, base_size=base_size, min_crops=min_crops, max_crops=max_crops)

    def fits(f: ViewFit) -> bool:
        return f.distortion <= MAX_DISTORTION and f.downscale <= max_downscale

    whole = fit(width, height)
    if fits(whole) or max_parts < 2:
        return None
    reason: Literal["aspect", "density"] = "aspect" if whole.distortion > MAX_DISTORTION else "density"
    tall = height >= width
    length = height if tall else width
    for n in range(2, max_parts + 1):
        bands, ov = _bands(length, n, overlap)
        size = bands[0][1] - bands[0][0]
        if fits(fit(width, size) if tall else fit(size, height)) or n == max_parts:
            boxes = tuple((0, a, width, b) if tall else (a, 0, b, height) for a, b in bands)
            return SplitPlan(reason, boxes, ov)
    return None  # unreachable: the loop returns at n == max_parts


# ---------- merging the parts' text ----------
_TAGS = re.compile(r"<\|ref\|>.*?<\|/ref\|>|<\|det\|>.*?<\|/det\|>|<\|/?(?:ref|det|grounding)\|>", re.S)
_SPACE = re.compile(r"\s+")
EDGE_SLACK = 2  # lines at a cut edge that may be cut in half (and so read differently by each part)
MIN_OVERLAP_CHARS = 16  # a shorter single common line ("---", "</table>") is not evidence of overlap


def line_key(line: str) -> str:
    """What two reads of the same line share: text without grounding tags, spaces collapsed."""
    return _SPACE.sub(" ", _TAGS.sub("", line)).strip()


def _find_overlap(ka: list[str], kb: list[str]) -> tuple[int, int] | None:
    """(last overlap line in A, last overlap line in B) as content-line indices, or None.

    The overlap is the longest run of equal lines that ends at most EDGE_SLACK content lines before
    A's end and starts at most EDGE_SLACK content lines after B's start (the lines the cut sliced).
    """
    best: tuple[tuple[int, int], tuple[int, int]] | None = None
    for drop_a in range(min(EDGE_SLACK, len(ka) - 1) + 1):
        end_a = len(ka) - drop_a
        for skip_b in range(min(EDGE_SLACK, len(kb) - 1) + 1):
            for k in range(min(end_a, len(kb) - skip_b), 0, -1):
                if ka[end_a - k:end_a] != kb[skip_b:skip_b + k]:
                    continue
                if k < 2 and sum(len(x) for x in kb[skip_b:skip_b + k]) < MIN_OVERLAP_CHARS:
                    break
                score = (k, -(drop_a + skip_b))
                if best is None or score > best[0]:
                    best = (score, (end_a - 1, skip_b + k - 1))
                break
    return best[1] if best else None


def merge_two(a: str, b: str) -> str:
    """A then B with the lines both read (the overlap band) once; no overlap found: A + B."""
    al, bl = a.split("\n"), b.split("\n")
    ia = [i for i, line in enumerate(al) if line_key(line)]
    ib = [i for i, line in enumerate(bl) if line_key(line)]
    found = _find_overlap([line_key(al[i]) for i in ia], [line_key(bl[i]) for i in ib]) if ia and ib else None
    if found is None:
        if not a.strip():
            return b
        if not b.strip():
            return a
        return a.rstrip("\n") + "\n" + b.lstrip("\n")
    end_a, end_b = ia[found[0]], ib[found[1]]
    return "\n".join(al[:end_a + 1] + bl[end_b + 1:])


def merge_parts(texts: Sequence[str]) -> str:
    """The parts' texts in reading order, each overlap kept once."""
    if not texts:
        return ""
    merged = texts[0]
    for nxt in texts[1:]:
        merged = merge_two(merged, nxt)
    return merged
