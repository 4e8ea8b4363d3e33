"""The inference engines, what each can serve and the defaults that follow the engine.

Why defaults depend on the engine: vLLM's DeepSeek-OCR 2 processor fixes its crop rule (768 px
crops beside a 1024 px global view, 2..6 crops for every page larger than one crop; its minimum
and maximum are module constants its placeholder count assumes). So with ENGINE=vllm the visual
token cap can only be 1120 and the floor at most 544 (2 crops). The transformers engine applies
any cap; its default is 1024 (up to 5 crops), DeepSeek-OCR 2's usual setting. Choosing an engine
alone must therefore give that engine's own cap, not one default that the other engine refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .tokens import BASE_SIZE, CROP_SIZE, MAX_CROPS, MIN_CROPS, TOKEN_CEILING, visual_tokens


@dataclass(frozen=True)
class EngineLimits:
    """One engine's defaults and the visual-token settings it can serve."""

    name: str
    default_max_visual_tokens: int
    # The only MAX_VISUAL_TOKENS the engine can apply, or None when it applies any cap in range.
    fixed_max_visual_tokens: int | None = None
    # The highest MIN_VISUAL_TOKENS the engine can honour (TOKEN_CEILING: any floor in range).
    highest_min_visual_tokens: int = TOKEN_CEILING
    # (INPUT_SIZE, BASE_SIZE) when the engine fixes them, else None.
    fixed_sizes: tuple[int, int] | None = None
    why: str = ""  # the reason for the limits, quoted in error messages


# 1024: up to 5 crops (976 tokens), DeepSeek-OCR 2's usual cap.
TRANSFORMERS = EngineLimits(name="transformers", default_max_visual_tokens=1024)
VLLM = EngineLimits(
    name="vllm",
    default_max_visual_tokens=TOKEN_CEILING,
    fixed_max_visual_tokens=TOKEN_CEILING,
    highest_min_visual_tokens=visual_tokens(MIN_CROPS),
    fixed_sizes=(CROP_SIZE, BASE_SIZE),
    why=f"vLLM's DeepSeek-OCR 2 processor fixes its crop rule: {CROP_SIZE} px crops beside a {BASE_SIZE} px global "
        f"view, {MIN_CROPS}..{MAX_CROPS} crops for every page larger than one crop",
)
ENGINE_LIMITS = {e.name: e for e in (TRANSFORMERS, VLLM)}
ENGINES = tuple(ENGINE_LIMITS)  # ("transformers", "vllm")
DEFAULT_ENGINE = TRANSFORMERS.name


def engine_limits(engine: str) -> EngineLimits:
    """The limits of `engine`; an unknown name gets the default engine's, since the engine setting
    itself is refused by validation with a message naming it (this keeps defaulting total)."""
    return ENGINE_LIMITS.get(engine, ENGINE_LIMITS[DEFAULT_ENGINE])


def default_max_visual_tokens(engine: str) -> int:
    """MAX_VISUAL_TOKENS (spec.inference.maxVisualTokens) when it is not set: 1024 for transformers,
    1120 for vLLM, so that choosing the engine alone starts."""
    return engine_limits(engine).default_max_visual_tokens
