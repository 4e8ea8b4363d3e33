"""The HTTP API's own models (pydantic): /v1/ocr's JSON body, the error body, and the OpenAI-compatible chat
API as vLLM serves it. The options and the OCR response are the service's (serving/schema.py)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..serving.schema import OcrOptions


class OcrJsonRequest(OcrOptions):
    image: str = Field(..., description="base64 of the image or PDF bytes (a data: URL prefix is accepted)")


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
    """What a chat completion may ask; unknown fields are refused, unsupported values too (openai_chat.py)."""

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
