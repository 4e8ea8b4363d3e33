"""OpenAI chat completions <-> the OCR service, as vLLM serves DeepSeek-OCR-2. Pure translation, no I/O.

A request is one user message with one image (a data: URL) and any prompt text, as the model
takes (serving/prompts.py). The two document prompts choose a mode, with or without the `<image>`
placeholder:
  `<image>\\n<|grounding|>Convert the document to markdown.` -> markdown (grounded layout)
  `<image>\\nFree OCR.`                                        -> free
and any other text (`Parse the figure.`, `Describe this image in detail.`, `Locate
<|ref|>...<|/ref|> in the image.`) is the model's prompt as written.
The answer's content is the model's raw output (what /v1/ocr returns as `raw`): grounding tags
included, as vLLM returns it with skip_special_tokens=False, which the DeepSeek-OCR recipes use.
Decoding is greedy with the windowed n-gram guard; `vllm_xargs` sets the guard per request, and
vLLM's `min_tokens` and `ignore_eos` (run to max_tokens) hold the end of text back.

Every parameter either works as OpenAI (or vLLM) documents it or is refused with a 400 naming it:
remote image URLs (fetching them would let any caller make the server connect anywhere), sampling
(temperature != 0, top_p != 1, penalties, n > 1), logprobs, tools, response formats, stop strings.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Literal, NoReturn

from ..engines.api import NGramSettings
from ..runtime.errors import BadInput, NotFound
from ..serving.prompts import prompt_from_text
from ..serving.schema import OcrOptions, OcrResponse
from .models import (
    AssistantMessage,
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChunkChoice,
    CompletionUsage,
    DeltaMessage,
)



@dataclass(frozen=True)
class ChatJob:
    data: bytes
    image_param: str  # where the image was in the request, for errors about it
    prompt_param: str  # where the prompt text was, for errors about it (its tokens are checked later)
    opts: OcrOptions
    ngram: NGramSettings | None
    stream: bool
    include_usage: bool


def _refuse(param: str, why: str) -> NoReturn:
    raise BadInput(f"{param}: {why}", param=param)


def check_supported(req: ChatCompletionRequest, max_new_tokens: int) -> int:
    """Refuse every parameter this server would otherwise ignore; returns the token budget."""
    if req.n not in (None, 1):
        _refuse("n", "only n=1 is supported (greedy decoding has one answer)")
    if req.temperature not in (None, 0):
        _refuse("temperature", f"{req.temperature} is not supported: this server decodes greedily (temperature 0), "
                "as DeepSeek-OCR-2 is meant to be run")
    if req.top_p not in (None, 1):
        _refuse("top_p", f"{req.top_p} is not supported: decoding is greedy (top_p 1)")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) not in (None, 0):
            _refuse(name, "penalties are not supported; the n-gram guard (vllm_xargs) stops repetition")
    if req.logit_bias:
        _refuse("logit_bias", "not supported")
    if req.logprobs or req.top_logprobs:
        _refuse("logprobs" if req.logprobs else "top_logprobs", "log probabilities are not returned by this server")
    for name in ("tools", "tool_choice", "functions", "function_call"):
        if getattr(req, name) not in (None, "none", []):
            _refuse(name, "tool calling is not supported by an OCR model")
    if req.response_format not in (None, {"type": "text"}):
        _refuse("response_format", "only text answers are produced")
    if req.stop:
        _refuse("stop", "stop sequences are not supported; the answer ends at the model's end of text or max_tokens")
    if req.stream_options is not None and not req.stream:
        _refuse("stream_options", "only allowed with stream=true")
    budget = req.max_completion_tokens or req.max_tokens
    if req.max_completion_tokens and req.max_tokens and req.max_completion_tokens != req.max_tokens:
        _refuse("max_tokens", "max_tokens and max_completion_tokens differ; send one")
    if budget is not None and budget > max_new_tokens:
        _refuse("max_tokens" if req.max_tokens else "max_completion_tokens",
                f"{budget} is more than this server generates per image (MAX_NEW_TOKENS={max_new_tokens})")
    return budget or max_new_tokens


def check_model(requested: str, served: str) -> None:
    if requested != served:
        raise NotFound(f"The model `{requested}` does not exist; this server serves `{served}` (GET /v1/models)", param="model")


def min_new_tokens(req: ChatCompletionRequest, budget: int) -> int | None:
    """vLLM's semantics: ignore_eos runs to max_tokens; min_tokens holds the end of text back that long."""
    if req.min_tokens is not None and req.min_tokens > budget:
        _refuse("min_tokens", f"{req.min_tokens} is more than max_tokens ({budget})")
    if req.ignore_eos:
        return budget
    return req.min_tokens or None


def image_from_url(url: str, param: str) -> bytes:
    """Decode a data: URL. Remote URLs are refused: fetching them would let callers make the server connect anywhere."""
    lowered = url[:16].lower()
    if lowered.startswith(("http://", "https://")):
        _refuse(param, "remote image URLs are not fetched (that would let any caller make this server connect to "
                "any address); send the image inline as a data URL: data:image/png;base64,...")
    if not lowered.startswith("data:"):
        _refuse(param, "only data: URLs are accepted (data:image/png;base64,...)")
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().endswith(";base64"):
        _refuse(param, "the data URL must be base64-encoded (data:<type>;base64,<data>)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        _refuse(param, "the data URL's payload is not valid base64")


def _parts(content: Any, param: str) -> tuple[str, tuple[str, str] | None]:
    """(joined text, (image url, its param) or None) of one message's content."""
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    texts, images = [], []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url":
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str):
                _refuse(f"{where}.image_url.url", "missing; expected {\"url\": \"data:image/png;base64,...\"}")
            images.append((url, f"{where}.image_url.url"))
        else:
            _refuse(f"{where}.type", f"content part type {kind!r} is not supported; use text and image_url")
    if len(images) > 1:
        _refuse(param, f"{len(images)} images in one message; send one image (one page) per request")
    return "\n".join(texts), (images[0] if images else None)


def job_from_request(req: ChatCompletionRequest, *, served_model: str, max_new_tokens: int) -> ChatJob:
    """Validate a chat request and turn it into the OCR service's input. Raises BadInput/NotFound."""
    check_model(req.model, served_model)
    budget = check_supported(req, max_new_tokens)
    for i, message in enumerate(req.messages):
        if message.role != "user":
            _refuse(f"messages[{i}].role", f"{message.role!r} messages are not supported: DeepSeek-OCR-2 has no chat "
                    "template; send one user message with the image and the prompt")
    if len(req.messages) != 1:
        _refuse("messages", "send exactly one user message (one image and the prompt)")
    text, image = _parts(req.messages[0].content, "messages[0].content")
    if image is None:
        _refuse("messages[0].content", "an image_url part with the page is required")
    prompt = prompt_from_text(text, "messages[0].content")
    url, image_param = image
    ngram = None
    if req.vllm_xargs is not None:
        x = req.vllm_xargs
        defaults = NGramSettings()
        ngram = NGramSettings(
            size=defaults.size if x.ngram_size is None else x.ngram_size,
            window=defaults.window if x.window_size is None else x.window_size,
            whitelist=frozenset(x.whitelist_token_ids or ()),
        )
    return ChatJob(
        data=image_from_url(url, image_param),
        image_param=image_param,
        prompt_param="messages[0].content",
        opts=OcrOptions(prompt_mode=prompt.mode, prompt=prompt.text, max_new_tokens=budget,
                        min_new_tokens=min_new_tokens(req, budget)),
        ngram=ngram,
        stream=bool(req.stream),
        include_usage=bool(req.stream_options and req.stream_options.include_usage),
    )


# ---------- answers ----------
def finish_reason(response: OcrResponse) -> Literal["stop", "length"]:
    return "stop" if all(p.finished for p in response.pages) else "length"


def usage(response: OcrResponse) -> CompletionUsage:
    u = response.usage
    return CompletionUsage(prompt_tokens=u.prompt_tokens, completion_tokens=u.generated_tokens,
                           total_tokens=u.prompt_tokens + u.generated_tokens)


def completion(response: OcrResponse, *, request_id: str, created: int, model: str) -> ChatCompletionResponse:
    return ChatCompletionResponse(
        id=request_id, created=created, model=model, system_fingerprint=response.model.revision,
        choices=[ChatChoice(message=AssistantMessage(content=response.raw), finish_reason=finish_reason(response))],
        usage=usage(response),
    )


def chunk(*, request_id: str, created: int, model: str, content: str | None = None, role: bool = False,
          finish: Literal["stop", "length"] | None = None) -> ChatCompletionChunk:
    delta = DeltaMessage(role="assistant" if role else None, content=content)
    return ChatCompletionChunk(id=request_id, created=created, model=model,
                               choices=[ChunkChoice(delta=delta, finish_reason=finish)])


def usage_chunk(response: OcrResponse, *, request_id: str, created: int, model: str) -> ChatCompletionChunk:
    return ChatCompletionChunk(id=request_id, created=created, model=model, choices=[], usage=usage(response))
