"""What the service takes and gives (pydantic): a request's options, and the typed OCR response.

/v1/ocr documents these models as its options and its answer; the OpenAI routes translate them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ocr_limits import TOKEN_CEILING, TOKEN_FLOOR, setting
from ocr_limits.prompts import MAX_PROMPT_CHARS, MODES

from ..engines.crops import CropPlan

# The prompt modes, as ocr_limits.prompts lists them (a tuple subscript is the Literal of its items).
PromptMode = Literal[MODES]  # type: ignore[valid-type]


class OcrOptions(BaseModel):
    """Per-request options; unknown keys are rejected (422), never ignored."""

    model_config = ConfigDict(extra="forbid")

    prompt_mode: PromptMode = Field("markdown", description="markdown: grounded layout; free: plain OCR")
    prompt: str | None = Field(
        None, max_length=MAX_PROMPT_CHARS,
        description="the model's instruction instead of the mode's, e.g. \"Parse the figure.\" or \"Locate <|ref|>the "
                    "title<|/ref|> in the image.\"; <image> (at most once) marks where the page goes, else it comes first")
    max_visual_tokens: int | None = Field(None, ge=TOKEN_FLOOR, le=TOKEN_CEILING, description="caps the crop count for this request")
    pages: str | None = Field(None, description='1-based pages of a PDF/TIFF, e.g. "1-3,5"')
    max_new_tokens: int | None = Field(None, ge=1, le=setting("MAX_NEW_TOKENS").maximum)
    min_new_tokens: int | None = Field(None, ge=0, le=setting("MAX_NEW_TOKENS").maximum,
                                       description="the end of text is not chosen before this many tokens (vLLM's min_tokens)")
    timeout_sec: float | None = Field(None, gt=0, le=setting("TIMEOUT_SEC").maximum,
                                      description="deadline, at most the server's TIMEOUT_SEC")
    split: Literal["auto", "off"] | None = Field(
        None, description="auto: cut a page the crop grid cannot show well into overlapping parts; default SPLIT_PAGES")
    stream: bool = Field(False, description="server-sent events: text deltas as generated, then the whole result")
    return_token_ids: bool = Field(
        False, description="pages[].token_ids and pages[].prompt_token_ids: the ids each engine generated and read "
                           "(one list per part of a page); to compare engines token for token, or to debug")


class BlockOut(BaseModel):
    label: str
    box: list[int] | None
    boxes: list[list[int]]
    text: str
    page: int


class Layout(BaseModel):
    image_size: list[int]
    global_view: list[int]
    crop_size: list[int]
    crop_grid: list[int]
    crops: int
    visual_tokens: int

    @classmethod
    def of(cls, plan: CropPlan) -> Layout:
        """How the model was shown a page (or a part of one)."""
        return cls(image_size=[plan.width, plan.height], global_view=[plan.base_size, plan.base_size],
                   crop_size=[plan.crop_size, plan.crop_size], crop_grid=[plan.cols, plan.rows], crops=plan.crops,
                   visual_tokens=plan.visual_tokens)


class Usage(BaseModel):
    visual_tokens: int
    generated_tokens: int
    pages: int
    prompt_tokens: int = Field(description="prompt ids the model read (image placeholders included), as OpenAI counts them")


class PartOut(BaseModel):
    """One part of a split page: where it lies on the page and how it was shown to the model."""

    box: list[int] = Field(description="[x1, y1, x2, y2] in page pixels")
    layout: Layout
    generated_tokens: int
    finished: bool


class SplitOut(BaseModel):
    reason: Literal["aspect", "density"]
    overlap_px: int
    parts: list[PartOut]


class PageOut(BaseModel):
    page: int
    text: str
    raw: str
    blocks: list[BlockOut]
    layout: Layout = Field(description="the page as one view; a split page's parts have their own")
    usage: Usage
    finished: bool
    outcome: Literal["ok", "loop", "truncated", "empty"] = Field(
        "ok", description="reference-free quality signal (serving/outcome.py): loop, truncated (the token budget "
        "ran out before the end), empty, or ok")
    split: SplitOut | None = None
    token_ids: list[list[int]] | None = Field(None, description="with return_token_ids: generated ids, one list per part")
    prompt_token_ids: list[list[int]] | None = Field(None, description="with return_token_ids: prompt ids, one list per part")


class ModelOut(BaseModel):
    name: str
    revision: str


class OcrResponse(BaseModel):
    text: str
    raw: str
    blocks: list[BlockOut]
    layout: Layout
    pages: list[PageOut]
    usage: Usage
    timings: dict[str, float]
    model: ModelOut
    cached: bool
    notice: str | None = None
    format: str | None = None
