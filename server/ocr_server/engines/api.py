"""The small interface between the serving layer (serving/service.py, engines/warmup.py) and an engine.

Two engines serve the same API: `transformers.engine.Engine` (one engine thread) and
`vllm.engine.VllmEngine` (vLLM's async engine in-process: continuous batching). The service
only needs, from either: inspect/load, the crop plan of a page, `prepare` (one page -> one item
with deadline/cancelled/ngram/on_token), a runner whose `submit(item)` answers a `Generated`, and
a synchronous `generate_batch` for the warm-up. Everything around it (auth, limits, cache, PDF,
metrics, health, TLS) stays shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ..runtime.config import ServerConfig
from ..runtime.metrics import Metrics
from ..runtime.plugins import EngineHooks


class StartupError(RuntimeError):
    """The engine refuses to serve (missing tensors, vocabulary mismatch...)."""


TD_TOKENS = ("<td>", "</td>")  # the official n-gram guard lets tables repeat their cell tags


@dataclass(frozen=True)
class NGramSettings:
    """The windowed no-repeat n-gram guard of one request (vLLM's vllm_xargs names in comments)."""

    size: int = 20  # ngram_size; 0 disables the guard
    window: int = 90  # window_size
    whitelist: frozenset[int] = frozenset()  # whitelist_token_ids, on top of <td> and </td>


@dataclass
class Generated:
    token_ids: list[int]
    raw: str
    finished: bool  # ended with EOS (False: stopped by max_new_tokens or deadline)
    stopped_early: bool  # deadline or cancellation


@dataclass(frozen=True)
class ModelInfo:
    name: str
    revision: str
    layout: str
    tiny: bool
    device: str
    dtype: str
    decoder: str = "generate"  # generate | slots (DECODER)



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
        from .vllm.engine import VllmEngine

        return VllmEngine(cfg)
    from .transformers.engine import Engine

    return Engine(cfg)


def make_runner(engine: Any, cfg: ServerConfig, metrics: Metrics, on_fatal: Callable[[BaseException], None],
                hooks: EngineHooks | None = None) -> Runner:
    """The engine's own runner when it has one (vLLM schedules itself), else the dynamic batcher."""
    if hasattr(engine, "runner"):
        return engine.runner(metrics=metrics, on_fatal=on_fatal)
    from .batcher import Batcher

    r = cfg.runtime
    if getattr(engine, "slots", None) is not None:  # DECODER=slots: pages join between decode steps
        from .transformers.slot_runner import SlotRunner

        return SlotRunner(engine, metrics=metrics, on_fatal=on_fatal, hooks=hooks)
    if hasattr(engine, "on_decode_step"):  # generate() reports the rows of each decode step
        engine.on_decode_step = metrics.batch_size.observe
    return Batcher(engine.generate_batch, batch_size=r.batch_size, wait_s=r.batch_wait_ms / 1000,
                   metrics=metrics, on_fatal=on_fatal, hooks=hooks)
