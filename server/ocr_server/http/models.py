"""Request and response models (pydantic only): /v1/ocr, and the OpenAI-compatible chat API as vLLM serves it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ocr_limits import TOKEN_CEILING, TOKEN_FLOOR, setting

from .prompts import MAX_PROMPT_CHARS


class OcrOptions(BaseModel):
    """Per-request options; unknown keys are rejected (422), never ignored."""

    model_config = ConfigDict(extra="forbid")

    prompt_mode: Literal["markdown", "free"] = Field("markdown", description="markdown: grounded layout; free: plain OCR")
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


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: int
    param: str | None = None


class ErrorOut(BaseModel):
    error: ErrorDetail


# ---------- OpenAI-compatible chat completions (field names and shapes as in vLLM's protocol) ----------
class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class VllmXargs(BaseModel):
    """vLLM's per-request arguments for the n-gram guard (NGramPerReqLogitsProcessor)."""

    model_config = ConfigDict(extra="forbid")

    ngram_size: int | None = Field(None, ge=0, le=1000, description="0 disables the guard")
    window_size: int | None = Field(None, ge=1, le=8192)
    whitelist_token_ids: list[int] | None = Field(None, max_length=1024)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None


class ChatCompletionRequest(BaseModel):
    """What a chat completion may ask; unknown fields are refused, unsupported values too (chat.py)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = None
    top_p: float | None = None
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None  # greedy decoding is deterministic: any seed gives the same answer
    user: str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: Any = None
    tool_choice: Any = None
    functions: Any = None
    function_call: Any = None
    response_format: Any = None
    vllm_xargs: VllmXargs | None = None
    # vLLM's extra sampling parameters: run to max_tokens, or at least this many tokens before the end of text
    ignore_eos: bool | None = None
    min_tokens: int | None = Field(None, ge=0)


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"]


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage
    system_fingerprint: str | None = None


class DeltaMessage(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChunkChoice(BaseModel):
    index: int = 0
    delta: DeltaMessage
    logprobs: None = None
    finish_reason: Literal["stop", "length"] | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "causalflow"
    root: str
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
