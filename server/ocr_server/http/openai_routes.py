"""Thin OpenAI-compatible routes: POST /v1/chat/completions (plain or streamed), GET /v1/models.

Same API keys, body limit, cache, deadlines, admission (and its X-Request-Class) and metrics as /v1/ocr: they all live in
the service and in routes.py, which these routes call. Errors have OpenAI's body shape
({"error": {"message", "type", "param", "code"}}) from the one error table (runtime/errors.py, http/errors.py).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ..runtime.errors import BadInput, OcrError
from ..serving.events import Delta, Done, Event
from . import openai_chat as chat
from .bodies import parse_json
from .errors import error_response
from .models import ChatCompletionRequest, ChatCompletionResponse, ErrorOut, ModelCard, ModelList
from .request_class import OPENAPI_PARAMETERS, read_request_class
from .routes import check_api_key, read_body, record
from .sse import frame, stream_response

router = APIRouter()
_ERRORS = {code: {"model": ErrorOut} for code in (400, 401, 404, 408, 413, 415, 429, 500, 503, 504)}
CHAT = "/v1/chat/completions"
STARTED_AT = int(time.time())
MAX_MODEL_LEN = 8192  # DeepSeek-OCR-2's max_position_embeddings


def served_model(request: Request) -> str:
    return request.app.state.config.model.name


def _explain(exc: ValidationError) -> BadInput:
    err = exc.errors()[0]
    loc = err["loc"]
    param = "".join(f"[{x}]" if isinstance(x, int) else (f".{x}" if i else str(x)) for i, x in enumerate(loc)) or "body"
    msg = "unsupported parameter" if err["type"] == "extra_forbidden" else err["msg"]
    return BadInput(f"{param}: {msg}", param=param)


async def _parse(request: Request) -> ChatCompletionRequest:
    cfg = request.app.state.config.service
    body = await read_body(request, cfg.max_body_bytes * 4 // 3 + 64 * 1024)  # base64 data URLs grow by 4/3
    payload = parse_json(body)
    if not isinstance(payload, dict):
        raise BadInput("the JSON body must be an object with model and messages")
    try:
        return ChatCompletionRequest(**payload)
    except ValidationError as exc:
        raise _explain(exc) from None


@router.get("/v1/models", response_model=ModelList, responses=_ERRORS)
async def models(request: Request) -> Response:
    try:
        check_api_key(request)
    except OcrError as exc:
        return error_response(exc)
    service = request.app.state.service
    root = service.info.revision if service.ready else "loading"
    card = ModelCard(id=served_model(request), created=STARTED_AT, root=root, max_model_len=MAX_MODEL_LEN)
    return JSONResponse(ModelList(data=[card]).model_dump())


@router.post(CHAT, response_model=ChatCompletionResponse, responses=_ERRORS,
             openapi_extra={"parameters": OPENAPI_PARAMETERS})
async def chat_completions(request: Request) -> Response:
    state = request.app.state
    start = time.monotonic()
    job = None
    try:
        request_class = read_request_class(request)
        tenant = check_api_key(request)
        req = await _parse(request)
        job = chat.job_from_request(req, served_model=served_model(request),
                                    max_new_tokens=state.config.runtime.max_new_tokens)
        ids = {"request_id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": req.model}
        if job.stream:
            events = state.service.stream(job.data, job.opts, job.ngram, tenant=tenant, request_class=request_class)
            await anext(events)  # Started: errors up to here are plain JSON answers
            return stream_response(request, events, _renderer(ids, job.include_usage), _error_chunks,
                                   endpoint=CHAT, start=start)
        result = await state.service.ocr(job.data, job.opts, job.ngram, tenant=tenant, request_class=request_class)
        response: Response = JSONResponse(chat.completion(result, **ids).model_dump())
    except OcrError as exc:
        if job is not None and exc.param in ("file", "image"):
            exc.param = job.image_param  # the page came from the message's image_url
        elif job is not None and exc.param == "prompt":
            exc.param = job.prompt_param  # the prompt came from the message's text
            exc.message = exc.message.replace("prompt:", f"{job.prompt_param}:", 1)
        response = error_response(exc)
    except Exception:  # noqa: BLE001 - never a traceback to the client
        state.log.exception("unexpected error in %s", CHAT)
        response = error_response(RuntimeError())
    record(request, CHAT, response.status_code, start)
    return response


def _renderer(ids: dict[str, Any], include_usage: bool) -> Callable[[Event], list[bytes]]:
    """Frames in OpenAI's order: content chunks (the first with the role), finish chunk, usage chunk, [DONE].

    The role goes out with the first text, as vLLM's server sends it when the engine's first token
    is out: a client timing its first chunk (vLLM's bench client, TTFT) then times the first token,
    not the request's admission."""
    role = [True]

    def render(event: Event) -> list[bytes]:
        first, role[0] = role[0], False
        if isinstance(event, Delta):
            return [frame(chat.chunk(content=event.text, role=first, **ids).model_dump())]
        if isinstance(event, Done):
            out = [frame(chat.chunk(role=True, content="", **ids).model_dump())] if first else []
            out.append(frame(chat.chunk(content="", finish=chat.finish_reason(event.response), **ids).model_dump()))
            if include_usage:
                out.append(frame(chat.usage_chunk(event.response, **ids).model_dump()))
            return out + [frame("[DONE]")]
        return []

    return render


def _error_chunks(payload: dict[str, Any]) -> list[bytes]:
    return [frame(payload), frame("[DONE]")]
