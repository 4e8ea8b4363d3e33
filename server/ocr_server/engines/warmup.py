"""Warm-up before Ready: real generations on generated pages of each view shape the server serves.

Why: the first generate on a fresh process pays one-off costs (on a GPU: CUDA context, kernel
loading and autotuning, the caching allocator growing; on any device: lazy imports and first-call
paths in torch and transformers). Readiness means "model loaded and warmed up", so the server pays
them before /health answers 200, not the first user. It runs on the engine thread that serves
batches (per-thread state: cuBLAS handles, streams). Shapes: on a CPU the global view alone and the
largest crop grid the server allows (the biggest activations, so the allocator grows once, here);
on a GPU every crop count it can serve, in both prompt modes, since kernels are chosen (and, for
some attention backends, built) per input shape and a measured first request of an unwarmed shape
paid seconds for it. With DECODER=slots on a GPU it then captures the decode step's CUDA graphs
(transformers/slots.py), one per slot bucket and KV-length bucket, so that no request pays for a capture.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TypeVar

from PIL import Image, ImageDraw

from ocr_limits import MIN_CROPS

from .api import OcrEngine, PreparedPage

log = logging.getLogger("ocr_server.warmup")
WARMUP_NEW_TOKENS = 16
_LINE = "Warm-up page {n}: invoice 2026-{n:02d}, total 1,234.56 EUR, thank you for your order."


def text_page(width: int, height: int) -> Image.Image:
    """A white page with lines of real text (the model sees what a document looks like)."""
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    for n, y in enumerate(range(24, height - 24, 32)):
        draw.text((24, y), _LINE.format(n=n % 100), fill=(20, 20, 20))
    return img


def grid_for(crops: int) -> tuple[int, int]:
    """(cols, rows) with cols*rows == crops, as square as possible (portrait): 6 -> (2, 3)."""
    cols = max(c for c in range(1, crops + 1) if crops % c == 0 and c * c <= crops)
    return cols, crops // cols


def warmup_pages(crop_size: int, max_crops: int, every_grid: bool = False) -> list[tuple[str, Image.Image]]:
    """One page per shape: global view only, and the largest grid (every_grid: each crop count)."""
    pages = [("global view", text_page(crop_size - 64, crop_size - 64))]
    counts = range(MIN_CROPS, max_crops + 1) if every_grid else ([max_crops] if max_crops >= MIN_CROPS else [])
    for crops in counts:
        cols, rows = grid_for(crops)
        pages.append((f"{cols}x{rows} crops", text_page(cols * crop_size, rows * crop_size)))
    return pages


@dataclass(frozen=True)
class WarmupReport:
    seconds: float
    steps: list[tuple[str, float]]  # (what, seconds)


P = TypeVar("P", bound=PreparedPage)


def run_warmup(engine: OcrEngine[P], max_new_tokens: int, *, gpu: bool = False) -> WarmupReport:
    """Generate on each warm-up page (prepared like a request's page). Runs before serving."""
    new = min(WARMUP_NEW_TOKENS, max_new_tokens)
    pages = warmup_pages(engine.cfg.model.input_size, engine.crop_bounds(None)[1], every_grid=gpu)
    modes = ("markdown", "free") if gpu else ("markdown",)
    t0 = time.monotonic()
    steps = []
    for name, image in pages:
        for mode in modes:
            item = engine.prepare(image, prompt_mode=mode, max_visual_tokens=None, max_new_tokens=new)
            t = time.monotonic()
            engine.generate_batch([item])
            steps.append((f"{name} ({item.plan.visual_tokens} visual tokens{', ' + mode if gpu else ''})", time.monotonic() - t))
    graphs = engine.capture_graphs() if gpu else None  # the decode step's graphs, every (slots x KV length) shape
    if graphs is not None:
        steps.append((f"{graphs.graphs} decode graphs", graphs.seconds))
    report = WarmupReport(time.monotonic() - t0, steps)
    log.info("warm-up done in %.2fs: %s", report.seconds, ", ".join(f"{n} {s:.2f}s" for n, s in steps))
    return report
