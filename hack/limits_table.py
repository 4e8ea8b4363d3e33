"""The server's limits and defaults table (docs/reference/server-configuration.md), from ocr_limits.

The model's visual-token arithmetic, what each engine can serve, each setting an OcrService sets by
a field (its default, its bounds, the field), and the server's queue settings (set through
spec.env). hack/generate.py writes it between the page's server-limits markers.
"""

from __future__ import annotations

from ocr_limits import (
    BASE_SIZE,
    CROP_SIZE,
    CROP_TOKENS,
    ENGINE_LIMITS,
    ENGINES,
    GLOBAL_TOKENS,
    MAX_CROPS,
    MIN_CROPS,
    SERVER_SETTINGS,
    SETTINGS,
    TOKEN_STEPS,
    TOKEN_STRIDE,
    Setting,
    default_max_visual_tokens,
)
from ocr_operator.api.ocrservice import FIELD_FOR_ENV

BEGIN = "<!-- BEGIN GENERATED: server-limits -->"
END = "<!-- END GENERATED: server-limits -->"


def _code(values) -> str:
    return ", ".join(f"`{v}`" for v in values)


def _value(s: Setting) -> str:
    """A setting's default and bounds, as the table's Value cell."""
    if s.default is None and s.env == "MAX_VISUAL_TOKENS":
        default = "follows `ENGINE`: " + ", ".join(f"`{default_max_visual_tokens(e)}` ({e})" for e in ENGINES)
    elif s.default is None and s.follows:
        default = s.follows
    else:
        default = f"`{s.default}`"
    if s.choices:
        return f"one of {_code(s.choices)}; default {default}"
    if s.minimum is not None:
        return f"`{s.minimum}`..`{s.maximum}`; default {default}"
    return default


def _engine_value(name: str) -> str:
    e = ENGINE_LIMITS[name]
    parts = []
    if e.fixed_max_visual_tokens is not None:
        parts.append(f"`MAX_VISUAL_TOKENS` `{e.fixed_max_visual_tokens}` only")
    if e.highest_min_visual_tokens < TOKEN_STEPS[-1]:
        parts.append(f"`MIN_VISUAL_TOKENS` at most `{e.highest_min_visual_tokens}`")
    if e.fixed_sizes is not None:
        parts.append(f"`INPUT_SIZE` `{e.fixed_sizes[0]}` with `BASE_SIZE` `{e.fixed_sizes[1]}` only")
    return "; ".join(parts)


def rows() -> list[tuple[str, str, str]]:
    """(name, value, what it bounds) for every limit and default the operator and server share."""
    out = [
        ("Tokens per view", f"`{CROP_TOKENS}` ({CROP_SIZE} px crop), `{GLOBAL_TOKENS}` ({BASE_SIZE} px global view)",
         f"a square view of side s costs (s / {TOKEN_STRIDE})² tokens; the model has query embeddings for "
         f"{CROP_SIZE} and {BASE_SIZE} px views only"),
        ("Crops per page", f"`0` or `{MIN_CROPS}`..`{MAX_CROPS}`",
         "a page no larger than one crop gets the global view only, a larger one a grid of crops"),
        ("Visual tokens per page", _code(TOKEN_STEPS),
         f"`MIN_VISUAL_TOKENS`, `MAX_VISUAL_TOKENS` and a request's `max_visual_tokens`: {GLOBAL_TOKENS} + "
         f"{CROP_TOKENS} per crop"),
    ]
    for s in SETTINGS:
        if s.default is None and s.minimum is None and not s.choices and s.env != "MAX_VISUAL_TOKENS":
            continue  # no default and no bounds (MODEL_PATH, the TLS files): nothing to tabulate
        out.append((f"`{s.env}`", _value(s), f"{s.bounds}; OcrService field `{FIELD_FOR_ENV[s.env]}`"))
    for s in SERVER_SETTINGS:
        out.append((f"`{s.env}`", _value(s), f"{s.bounds}; no OcrService field: set it in `spec.env`"))
    for name in ENGINES:
        value = _engine_value(name)
        if value:
            out.append((f"`ENGINE={name}`", value, ENGINE_LIMITS[name].why))
    return out


def table() -> str:
    lines = ["| Name | Value | What it bounds |", "|---|---|---|"]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows()]
    return "\n".join(lines)
