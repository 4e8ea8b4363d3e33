"""A stand-in engine for tests that must control timing (queue full, deadlines). Not a model.

`python -m ocr_server_testing.stand_in` serves the real app (routes, admission, batcher, errors)
around an engine whose generate sleeps STAND_IN_GENERATE_SEC per batch and counts the pages it
was given, exposed at GET /stand-in/stats. Everything else in the tests uses the real engine.
"""

from __future__ import annotations

import os
import threading
import time

import torch
from fastapi.responses import JSONResponse

from ocr_server.runtime.config import ServerConfig, crops_allowed, load_config
from ocr_server.engines.api import Generated, ModelInfo
from ocr_server.engines.transformers.engine import Prepared
from ocr_server.engines.crops import plan_crops


class StandInEngine:
    def __init__(self, cfg: ServerConfig, generate_sec: float) -> None:
        self.cfg, self.generate_sec = cfg, generate_sec
        self.info: ModelInfo | None = None
        self.pages_generated = 0
        self.batches = 0
        self._lock = threading.Lock()

    def load(self) -> ModelInfo:
        plan_crops(1600, 800, crop_size=768, base_size=1024, min_crops=2, max_crops=6)  # its imports take seconds once
        self.info = ModelInfo("stand-in (no model)", "stand-in", "none", True, "cpu", "none")
        return self.info

    def prepare(self, image, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int) -> Prepared:
        plan = plan_crops(image.width, image.height, crop_size=768, base_size=1024, min_crops=2,
                          max_crops=crops_allowed(max_visual_tokens or self.cfg.model.max_visual_tokens))
        return Prepared([0], torch.zeros(1), None, plan, max_new_tokens)

    def generate_batch(self, items: list[Prepared]) -> list[Generated]:
        with self._lock:
            self.pages_generated += len(items)
            self.batches += 1
        time.sleep(self.generate_sec)
        return [Generated([5, 6], "stand-in output", True, False) for _ in items]


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
