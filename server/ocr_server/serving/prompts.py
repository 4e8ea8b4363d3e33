"""The prompt the model reads beside the image: the two modes' fixed prompts, or the caller's own text.

DeepSeek-OCR 2 takes any instruction after its image placeholder; its documented ones include
`Parse the figure.`, `Describe this image in detail.` and grounding queries such as
`Locate <|ref|>the title<|/ref|> in the image.`. The two modes (markdown, free) are its two
document prompts (ocr_limits.prompts). A caller's text is bounded in characters here and in tokens
by the engine's own tokenizer (engines/prompt_check.py, which also refuses the tokens that frame a
sequence or a turn).
`<image>` marks where the page goes: at most once; without it the page comes first, as vLLM's
chat template for this model places it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocr_limits.prompts import IMAGE, MAX_PROMPT_CHARS, PROMPTS

from ..runtime.errors import BadInput

MODE_OF_TEXT = {p.removeprefix(f"{IMAGE}\n"): mode for mode, p in PROMPTS.items()}
@dataclass(frozen=True)
class Prompt:
    """What a request asks: one of the modes (mode set, text None) or its own text (text set)."""

    mode: str
    text: str | None = None


def prompt_from_text(text: str, param: str, default_mode: str = "free") -> Prompt:
    """A caller's text -> a mode when it is one of the mode prompts (with or without `<image>`), else
    the text itself with the page placed first unless `<image>` says where. Bounds characters."""
    images = text.count(IMAGE)
    if images > 1:
        raise BadInput(f"{param}: `{IMAGE}` appears {images} times; it marks where the one page goes, "
                       "so at most once", param=param)
    mode = MODE_OF_TEXT.get(text.replace(IMAGE, "").strip())
    if mode is not None:
        return Prompt(mode)
    full = text if images else f"{IMAGE}\n{text}"
    if len(full) > MAX_PROMPT_CHARS:
        raise BadInput(f"{param}: the prompt text is {len(text)} characters; at most {MAX_PROMPT_CHARS} "
                       f"with the `{IMAGE}` placeholder", param=param)
    return Prompt(default_mode, full)


def full_prompt(mode: str, text: str | None) -> str:
    """The prompt the engine expands: the mode's, or the caller's (already holding one `<image>`)."""
    return PROMPTS[mode] if text is None else text
