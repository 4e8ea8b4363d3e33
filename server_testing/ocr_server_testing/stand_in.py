"""A stand-in engine for tests that must control timing (queue full, deadlines). Not a model.

`python -m ocr_server_testing.stand_in` serves the real app (routes, admission, batcher, errors)
around an engine whose generate sleeps STAND_IN_GENERATE_SEC per batch and counts the pages it
was given, exposed at GET /stand-in/stats. Everything else in the tests uses the real engine. It
implements the whole engine protocol (ocr_server.engines.api.OcrEngine) with the dynamic batcher.
"""

from __future__ import annotations

import os
import threading
import time

from fastapi.responses import JSONResponse
from PIL import Image

from ocr_limits import TOKEN_CEILING
from ocr_server.engines.api import DecoderReport, Generated, GraphCapture, ModelInfo, PreparedPage, RunnerContext
from ocr_server.engines.batcher import Batcher
from ocr_server.engines.crops import CropPlan, plan_crops
from ocr_server.engines.detokenize import IncrementalDecoder
from ocr_server.runtime.config import ServerConfig, crops_allowed, load_config

CROP, BASE = 768, 1024


class StandInEngine:
    def __init__(self, cfg: ServerConfig, generate_sec: float) -> None:
        self.cfg, self.generate_sec = cfg, generate_sec
        self.info: ModelInfo | None = None
        self.pages_generated = 0
        self.batches = 0
        self._lock = threading.Lock()

    def inspect(self) -> None:
        """No model directory to read."""

    def load(self) -> ModelInfo:
        plan_crops(1600, 800, crop_size=CROP, base_size=BASE, min_crops=2, max_crops=6)  # its imports take seconds once
        self.info = ModelInfo("stand-in (no model)", "stand-in", "none", True, "cpu", "none")
        return self.info

    def crop_bounds(self, max_visual_tokens: int | None) -> tuple[int, int]:
        return 2, crops_allowed(max_visual_tokens or self.cfg.model.max_visual_tokens or TOKEN_CEILING)

    def plan(self, image: Image.Image, max_visual_tokens: int | None = None) -> CropPlan:
        lo, cap = self.crop_bounds(max_visual_tokens)
        return plan_crops(image.width, image.height, crop_size=CROP, base_size=BASE, min_crops=lo, max_crops=cap)

    def check_prompt(self, text: str, param: str) -> int:
        return len(text.split())

    def prepare(self, image: Image.Image, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int,
                prompt: str | None = None) -> PreparedPage:
        return PreparedPage(plan=self.plan(image, max_visual_tokens), max_new_tokens=max_new_tokens, input_ids=[0])

    def stream_decoder(self) -> IncrementalDecoder:
        return IncrementalDecoder(lambda ids: "".join(map(str, ids)))

    def generate_batch(self, items: list[PreparedPage]) -> list[Generated]:
        with self._lock:
            self.pages_generated += len(items)
            self.batches += 1
        time.sleep(self.generate_sec)
        return [Generated([5, 6], "stand-in output", True, False) for _ in items]

    def runner(self, ctx: RunnerContext) -> Batcher[PreparedPage]:
        r = self.cfg.runtime
        return Batcher(self.generate_batch, batch_size=r.batch_size, wait_s=r.batch_wait_ms / 1000,
                       metrics=ctx.metrics, on_fatal=ctx.on_fatal, hooks=ctx.hooks)

    def decoder_report(self) -> DecoderReport | None:
        return None

    def capture_graphs(self) -> GraphCapture | None:
        return None


def main() -> int:
    from ocr_server.http.app import build_app
    from ocr_server.http.server import serve
    from ocr_server.runtime.plugins import load_plugins

    cfg = load_config()
    engine = StandInEngine(cfg, float(os.environ.get("STAND_IN_GENERATE_SEC", "1.0")))
    app = build_app(cfg, engine, hooks=load_plugins(cfg.runtime.plugins))

    @app.get("/stand-in/stats")
    async def stats() -> JSONResponse:
        return JSONResponse({"pages_generated": engine.pages_generated, "batches": engine.batches})

    serve(app, cfg, log_level="warning")  # the server's own uvicorn settings: graceful shutdown included
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
