"""The engine ENGINE names (engines/api.py is the protocol both implement)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runtime.config import ServerConfig
from .api import OcrEngine

if TYPE_CHECKING:
    from .transformers.engine import TensorPage
    from .vllm.engine import VllmPage


def create_engine(cfg: ServerConfig) -> OcrEngine[TensorPage] | OcrEngine[VllmPage]:
    """vLLM is imported only when chosen (it lives in its own virtual environment)."""
    if cfg.runtime.engine == "vllm":
        from .vllm.engine import VllmEngine

        return VllmEngine(cfg)
    from .transformers.engine import Engine

    return Engine(cfg)
