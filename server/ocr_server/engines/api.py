"""The small interface between the serving layer (service.py, warmup.py) and an engine.

Two engines serve the same API: `engine.Engine` (transformers: static batches, one engine thread)
and `vllm_engine.VllmEngine` (vLLM's async engine in-process: continuous batching). The service
only needs, from either: inspect/load, the crop plan of a page, `prepare` (one page -> one item
with deadline/cancelled/ngram/on_token), a runner whose `submit(item)` answers a `Generated`, and
a synchronous `generate_batch` for the warm-up. Everything around it (auth, limits, cache, PDF,
metrics, health, TLS) stays shared.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

from .config import ServerConfig
from .metrics import Metrics


class Runner(Protocol):
    """Where the service sends prepared pages: the transformers batcher, or vLLM's engine."""

    executor: Any  # the thread on which warm-up generations run

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def submit(self, item: Any) -> Any: ...


class OcrEngine(Protocol):
    cfg: ServerConfig
    info: Any

    def inspect(self) -> None: ...

    def load(self) -> Any: ...

    def crop_bounds(self, max_visual_tokens: int | None) -> tuple[int, int]: ...

    def plan(self, image: Any, max_visual_tokens: int | None = None) -> Any: ...

    def prepare(self, image: Any, *, prompt_mode: str, max_visual_tokens: int | None, max_new_tokens: int) -> Any: ...

    def generate_batch(self, items: list[Any]) -> list[Any]: ...


def create_engine(cfg: ServerConfig) -> OcrEngine:
    """The engine ENGINE names; vLLM is imported only when chosen (it lives in its own venv)."""
    if cfg.runtime.engine == "vllm":
        from .vllm_engine import VllmEngine

        return VllmEngine(cfg)
    from .engine import Engine

    return Engine(cfg)


def make_runner(engine: Any, cfg: ServerConfig, metrics: Metrics, on_fatal: Callable[[BaseException], None]) -> Runner:
    """The engine's own runner when it has one (vLLM schedules itself), else the dynamic batcher."""
    if hasattr(engine, "runner"):
        return engine.runner(metrics=metrics, on_fatal=on_fatal)
    from .batching import Batcher

    r = cfg.runtime
    if getattr(engine, "slots", None) is not None:  # DECODER=slots: pages join between decode steps
        from .slot_runner import SlotRunner
        from .testhooks import wedge_on_cue

        return SlotRunner(engine, metrics=metrics, on_fatal=on_fatal,
                          wrap_admit=wedge_on_cue if r.test_hooks == "wedge" else None)
    if hasattr(engine, "on_decode_step"):  # generate() reports the rows of each decode step
        engine.on_decode_step = metrics.batch_size.observe
    run_batch = engine.generate_batch
    if r.test_hooks == "wedge":
        from .testhooks import wedge_on_cue

        run_batch = wedge_on_cue(run_batch)
    return Batcher(run_batch, batch_size=r.batch_size, wait_s=r.batch_wait_ms / 1000,
                   metrics=metrics, on_fatal=on_fatal)
