"""Request and response models (pydantic only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class OcrOptions(BaseModel):
    """Per-request options; unknown keys are rejected (422), never ignored."""

    model_config = ConfigDict(extra="forbid")

    prompt_mode: Literal["markdown", "free"] = Field("markdown", description="markdown: grounded layout; free: plain OCR")
    max_visual_tokens: int | None = Field(None, ge=256, le=1120, description="caps the crop count for this request")
    pages: str | None = Field(None, description='1-based pages of a PDF/TIFF, e.g. "1-3,5"')
    max_new_tokens: int | None = Field(None, ge=1, le=8192)
    timeout_sec: float | None = Field(None, gt=0, le=3600, description="deadline, at most the server's TIMEOUT_SEC")


class OcrJsonRequest(OcrOptions):
    image: str = Field(..., description="base64 of the image or PDF bytes (a data: URL prefix is accepted)")


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


class Usage(BaseModel):
    visual_tokens: int
    generated_tokens: int
    pages: int


class PageOut(BaseModel):
    page: int
    text: str
    raw: str
    blocks: list[BlockOut]
    layout: Layout
    usage: Usage
    finished: bool


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


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int
    param: str | None = None


class ErrorOut(BaseModel):
    error: ErrorDetail
