"""The visual-token rules of an OcrService spec, in CEL and in Python, from ocr_limits' arithmetic.

They sit on the spec, not on spec.inference, to read spec.engine: an unset maxVisualTokens is the
engine's default (the operator fills it in; the CRD cannot default one field from another), so
each rule reads the cap as `inference.maxVisualTokens if set, else the engine's default`.
"""

from __future__ import annotations

from typing import Any

from ocr_limits import (
    CROP_TOKENS,
    DEFAULT_ENGINE,
    ENGINE_LIMITS,
    ENGINES,
    GLOBAL_TOKENS,
    MAX_CROPS,
    MIN_CROPS,
    TOKEN_CEILING,
    TOKEN_STEPS,
    EngineLimits,
    default_max_visual_tokens,
    setting,
    token_budget_fits,
)

from ..fields import Rule

TOKEN_ORDER_ERROR = ("spec.inference.minVisualTokens must be <= spec.inference.maxVisualTokens (when unset, "
                     "maxVisualTokens is the engine's default: " + ", ".join(
                         f"{e} {default_max_visual_tokens(e)}" for e in ENGINES) + ")")
TOKEN_BUDGET_ERROR = ("spec.inference.minVisualTokens needs more crops than spec.inference.maxVisualTokens allows: "
                      f"token counts are {GLOBAL_TOKENS} (global view) + {CROP_TOKENS} per crop with "
                      f"{MIN_CROPS}..{MAX_CROPS} crops ({', '.join(map(str, TOKEN_STEPS))})")


def engine_error(e: EngineLimits) -> str:
    """What spec.engine `e` cannot serve, naming the fields to change."""
    needs = []
    if e.fixed_max_visual_tokens is not None:
        needs.append(f"spec.inference.maxVisualTokens {e.fixed_max_visual_tokens} (its default, when unset)")
    if e.highest_min_visual_tokens < setting("MIN_VISUAL_TOKENS").maximum:
        needs.append(f"spec.inference.minVisualTokens <= {e.highest_min_visual_tokens}")
    return (f"spec.engine {e.name} needs " + " and ".join(needs) + f": {e.why}, so a lower cap or a higher floor "
            "cannot be applied")


def engine_serves(e: EngineLimits, inference: Any) -> bool:
    """Whether the engine can apply these visual-token settings (ocr_limits.engines)."""
    if e.fixed_max_visual_tokens is not None and inference.max_visual_tokens != e.fixed_max_visual_tokens:
        return False
    return inference.min_visual_tokens <= e.highest_min_visual_tokens


ENGINE = f"(has(self.engine) ? self.engine : '{DEFAULT_ENGINE}')"


def _engine_default_max() -> str:
    """maxVisualTokens' default for spec.engine, in CEL: a chain over the engines whose default is
    not the default engine's."""
    expr = str(default_max_visual_tokens(DEFAULT_ENGINE))
    for engine in reversed(ENGINES):
        if default_max_visual_tokens(engine) != default_max_visual_tokens(DEFAULT_ENGINE):
            expr = f"{ENGINE} == '{engine}' ? {default_max_visual_tokens(engine)} : {expr}"
    return f"({expr})"


MIN_TOKENS = (f"(has(self.inference) && has(self.inference.minVisualTokens) ? self.inference.minVisualTokens : "
              f"{setting('MIN_VISUAL_TOKENS').default})")
MAX_TOKENS = ("(has(self.inference) && has(self.inference.maxVisualTokens) ? self.inference.maxVisualTokens : "
              f"{_engine_default_max()})")


def _engine_rule(e: EngineLimits) -> Rule | None:
    needs = []
    if e.fixed_max_visual_tokens is not None:
        needs.append(f"{MAX_TOKENS} == {e.fixed_max_visual_tokens}")
    if e.highest_min_visual_tokens < TOKEN_CEILING:
        needs.append(f"{MIN_TOKENS} <= {e.highest_min_visual_tokens}")
    if not needs:
        return None
    return Rule(f"{ENGINE} != '{e.name}' || ({' && '.join(needs)})", engine_error(e), ".engine",
                lambda s: s.engine != e.name or engine_serves(e, s.inference))


def token_rules() -> tuple[Rule, ...]:
    """Each engine's limits, floor <= cap, and a crop count between them."""
    engines = tuple(r for r in map(_engine_rule, ENGINE_LIMITS.values()) if r is not None)
    # crops_required(min) <= crops_allowed(max); ceil((min - 256) / 144) is (min - 113) / 144 in integers.
    required = f"({MIN_TOKENS} - {GLOBAL_TOKENS - CROP_TOKENS + 1}) / {CROP_TOKENS}"
    allowed = f"({MAX_TOKENS} - {GLOBAL_TOKENS}) / {CROP_TOKENS}"
    return engines + (
        Rule(f"{MIN_TOKENS} <= {MAX_TOKENS}", TOKEN_ORDER_ERROR, ".inference.minVisualTokens",
             lambda s: s.inference.min_visual_tokens <= s.inference.max_visual_tokens),
        Rule(f"{MIN_TOKENS} <= {GLOBAL_TOKENS} || ({required} < {MIN_CROPS} ? {MIN_CROPS} : {required}) <= "
             f"({allowed} > {MAX_CROPS} ? {MAX_CROPS} : {allowed})", TOKEN_BUDGET_ERROR, ".inference.minVisualTokens",
             lambda s: token_budget_fits(s.inference.min_visual_tokens, s.inference.max_visual_tokens)),
    )
