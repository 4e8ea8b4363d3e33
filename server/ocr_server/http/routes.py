"""Thin HTTP routes: read a bounded body, validate options, call the service, map errors."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from ocr_limits.request_classes import INTERACTIVE

from .. import __version__
from ..runtime.errors import BadInput, BodyTimeout, InvalidOptions, OcrError, PayloadTooLarge, Unauthorized, UnsupportedMedia
from ..runtime.liveness import is_wedged, wedged_message
from ..serving.cache import tenant_id
from ..serving.events import Delta, Done, Event
from ..serving.schema import OcrOptions, OcrResponse
from ..serving.service import decode_base64
from .answer import ocr_answer, shadow_ticket
from .bodies import parse_json, single_options
from .budget import LEASE_KEY, BodyLease
from .errors import error_response
from .gatekey import addressed_to_pod, bearer, matches
from .models import ErrorOut, OcrJsonRequest
from .request_class import OPENAPI_PARAMETERS, read_request_class
from .sse import frame, stream_response

router = APIRouter()
_ERRORS = {code: {"model": ErrorOut} for code in (400, 401, 404, 408, 413, 415, 422, 429, 500, 503, 504)}
_RAW_TYPES = ("image/", "application/pdf", "application/octet-stream")
# A form carries the file and a few options: more fields, or an option field larger than this, is a 400.
MAX_FORM_FIELDS = 16
MAX_FIELD_BYTES = 64 * 1024


@dataclass(frozen=True)
class Caller:
    """Who sent a request: its tenant for the result cache (cache.tenant_id: '' without keys), and
    whether it came with the quality gate's key (the gate's own pages: shadow pages never copy them)."""

    tenant: str
    gate: bool = False


def authenticate(request: Request, *, gate: bool = False) -> Caller:
    """Constant-time compare against every configured key; health and metrics never call this.
    `gate`: a route the quality gate calls (golden pages, /v1/ocr), where the gate key is also
    accepted when the request is addressed to the pod itself (gatekey.py), API keys or none."""
    keys = request.app.state.api_keys.keys  # reload.KeyStore: API_KEYS, or API_KEYS_FILE as it is now
    given = bearer(request.headers.get("authorization", "")) or request.headers.get("x-api-key", "")
    if gate and is_gate_key(request, given):
        return Caller(tenant_id(given if keys else None), gate=True)
    if not keys:
        return Caller(tenant_id(None))
    if matches(given, keys):
        return Caller(tenant_id(given))
    raise Unauthorized("a valid API key is required (Authorization: Bearer <key> or X-API-Key)")


def is_gate_key(request: Request, given: str) -> bool:
    """Whether `given` is one of the quality gate's keys (GATE_KEY_FILE, as it is now) on a request
    addressed to the pod itself (gatekey.py): the only place a gate key is taken."""
    state = request.app.state
    gate_keys = getattr(state, "gate_keys", None)
    return (matches(given, gate_keys.keys if gate_keys is not None else ())
            and addressed_to_pod(request.headers.get("host"), getattr(state, "pod_ip", None)))


def check_api_key(request: Request, *, gate: bool = False) -> str:
    """authenticate's tenant."""
    return authenticate(request, gate=gate).tenant


def _retry_after(request: Request) -> int:
    """Seconds a client refused for the body budget should wait: about as long as the requests
    ahead of it take to finish (the admission's estimate), 1 before the model is up."""
    service = request.app.state.service
    return service.admission.retry_after() if service.ready else 1


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing as soon as it exceeds `limit` (not after buffering it all) or takes
    longer than BODY_TIMEOUT_SEC to arrive (408: uvicorn bounds no body in time). Its bytes are
    reserved in the server's body budget (budget.py) before they are read: a declared length at
    once, else chunk by chunk; past the budget, a 503 with Retry-After."""
    declared = request.headers.get("content-length")
    lease: BodyLease = getattr(request.state, LEASE_KEY)
    reserved = 0
    if declared and declared.isdigit():
        if int(declared) > limit:
            raise PayloadTooLarge(f"the body is {declared} bytes; the limit is {limit}")
        reserved = int(declared)
        lease.reserve(reserved, _retry_after(request))
    timeout = request.app.state.config.service.body_timeout_sec
    chunks, size = [], 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise PayloadTooLarge(f"the body exceeds the limit of {limit} bytes")
                if size > reserved:  # no Content-Length: each chunk as it comes
                    lease.reserve(size - reserved, _retry_after(request))
                    reserved = size
                chunks.append(chunk)
    except TimeoutError:
        raise BodyTimeout(f"the body did not arrive within {timeout:g} s (BODY_TIMEOUT_SEC); "
                          f"{size} bytes came") from None
    except ClientDisconnect:  # nobody reads the answer; a 400, not a 500, in the metrics and the log
        raise BadInput(f"the connection closed after {size} bytes, before the body was complete") from None
    body = b"".join(chunks)
    request._body = body  # noqa: SLF001 - lets request.form() parse the bytes already read
    return body


def _options(values: dict) -> OcrOptions:
    try:
        return OcrOptions(**values)
    except ValidationError as exc:
        raise InvalidOptions(explain(exc), param=error_param(exc)) from None


def explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "body"
        msg = "unknown option" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)


def error_param(exc: ValidationError) -> str | None:
    errs = exc.errors()
    return ".".join(str(x) for x in errs[0]["loc"]) if errs else None


async def parse_request(request: Request) -> tuple[bytes, OcrOptions]:
    cfg = request.app.state.config.service
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # base64 grows data by 4/3; allow that for JSON bodies so the decoded limit is the same.
    limit = cfg.max_body_bytes * 4 // 3 + 4096 if ctype == "application/json" else cfg.max_body_bytes + 64 * 1024
    if ctype == "multipart/form-data":
        await read_body(request, limit)
        try:
            form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FIELD_BYTES)
        except HTTPException as exc:  # starlette's message: too many files or fields, a field too large
            raise BadInput(f"the multipart body could not be parsed: {exc.detail}") from None
        except Exception:  # noqa: BLE001 - malformed multipart bodies
            raise BadInput("the multipart body could not be parsed") from None
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise BadInput("multipart field 'file' with the document is required", param="file")
        data = await upload.read()
        if len(data) > cfg.max_body_bytes:
            raise PayloadTooLarge(f"the file exceeds the limit of {cfg.max_body_bytes} bytes", param="file")
        values = single_options(form=[(k, v) for k, v in form.multi_items() if k != "file"],
                                query=request.query_params.multi_items())
        return data, _options(values)
    if ctype == "application/json":
        body = await read_body(request, limit)
        payload = parse_json(body)
        if request.query_params:
            key = next(iter(request.query_params))
            raise InvalidOptions(f"{key}: the options of a JSON request go in its body, not in the query string",
                                 param=key)
        if not isinstance(payload, dict):
            raise BadInput('the JSON body must be an object like {"image": "<base64>"}')
        try:
            req = OcrJsonRequest(**payload)
        except ValidationError as exc:
            raise InvalidOptions(explain(exc), param=error_param(exc)) from None
        data = decode_base64(req.image)
        if len(data) > cfg.max_body_bytes:
            raise PayloadTooLarge(f"the decoded image exceeds the limit of {cfg.max_body_bytes} bytes", param="image")
        return data, OcrOptions(**req.model_dump(exclude={"image"}))
    if ctype.startswith(_RAW_TYPES):
        data = await read_body(request, cfg.max_body_bytes)
        return data, _options(single_options(query=request.query_params.multi_items()))
    raise UnsupportedMedia(
        f"content type {ctype[:100] or '(none)'!r} is not accepted; use multipart/form-data (field 'file'), "
        "application/json ({\"image\": base64}) or a raw image/* or application/pdf body"
    )


def _ocr_events(event: Event) -> list[bytes]:
    if isinstance(event, Delta):
        return [frame({"text": event.text}, "delta")]
    if isinstance(event, Done):
        return [frame(event.response.model_dump(), "result")]
    return []


def _ocr_error(payload: dict[str, Any]) -> list[bytes]:
    return [frame(payload, "error")]


_STREAM_DOC = {"text/event-stream": {"schema": {"type": "string"}, "description": (
    "with stream=true: `event: delta` / `data: {\"text\": ...}` as the raw text is generated, then "
    "`event: result` with the whole OcrResponse; a failure after the first event is an `event: error`")}}


@router.post("/v1/ocr", response_model=OcrResponse, responses={**_ERRORS, 200: {"content": _STREAM_DOC}},
             openapi_extra={"parameters": OPENAPI_PARAMETERS})
async def ocr(request: Request) -> Response:
    state = request.app.state
    start = time.monotonic()
    caller = Caller("")
    try:
        request_class = read_request_class(request)
        caller = authenticate(request, gate=True)
        data, opts = await parse_request(request)
        if opts.stream:
            events = state.service.stream(data, opts, tenant=caller.tenant, request_class=request_class)
            await anext(events)  # Started: errors up to here are plain JSON answers
            shadow_ticket(request, caller.gate, stream=True, status=200)  # counted, never copied
            return stream_response(request, events, _ocr_events, _ocr_error, endpoint="/v1/ocr", start=start)
        result = await state.service.ocr(data, opts, tenant=caller.tenant, request_class=request_class)
        response: Response = ocr_answer(request, result, data, opts, gate=caller.gate, ready=time.monotonic())
    except OcrError as exc:
        response = error_response(exc)
    except Exception:  # noqa: BLE001 - never a traceback to the client
        state.log.exception("unexpected error in /v1/ocr")
        response = error_response(RuntimeError())
    if response.status_code != 200:
        shadow_ticket(request, caller.gate, stream=False, status=response.status_code)  # counted, never copied
    record(request, "/v1/ocr", response.status_code, start)
    return response


def record(request: Request, endpoint: str, status: int, start: float) -> None:
    metrics = request.app.state.metrics
    metrics.requests.labels(endpoint, str(status), getattr(request.state, "request_class", INTERACTIVE)).inc()
    metrics.latency.observe(time.monotonic() - start)


def _wedged(request: Request) -> str | None:
    """Why the engine counts as wedged (runtime/liveness.py), or None."""
    stalled, bound = request.app.state.service.engine_stalled_for(), request.app.state.config.runtime.liveness_stall_sec
    if not is_wedged(stalled, bound):
        return None
    message = wedged_message(stalled, bound)
    request.app.state.log.error("%s", message)
    return message


def _health_body(request: Request) -> tuple[int, dict[str, Any], dict[str, str]]:
    service = request.app.state.service
    if service.ready and (why := _wedged(request)):
        return 503, {"status": "stalled", "error": why, "version": __version__}, {}
    if service.ready:
        info = service.info
        decoder = service.engine.decoder_report()  # the transformers engine's decoder, its slots and graphs
        return 200, {"status": "ok", "model": info.name, "revision": info.revision, "version": __version__,
                     "device": info.device, "dtype": info.dtype, "layout": info.layout, "tiny": info.tiny,
                     **({"decoder": decoder.as_dict()} if decoder is not None else {})}, {}
    if service.load_error:
        return 503, {"status": "failed", "error": service.load_error, "version": __version__}, {}
    return 503, {"status": "loading", "model": request.app.state.config.model.name, "version": __version__}, {"Retry-After": "5"}


@router.get("/health")
async def health(request: Request) -> Response:
    code, body, headers = _health_body(request)
    return JSONResponse(body, status_code=code, headers=headers)


@router.get("/health/ready")
async def ready(request: Request) -> Response:
    code, body, headers = _health_body(request)
    return JSONResponse(body, status_code=code, headers=headers)


@router.get("/health/live")
async def live(request: Request) -> Response:
    """The process and its event loop answer, and the engine is not wedged (owing work without
    progress for LIVENESS_STALL_SEC); a dead engine exits the process instead."""
    if why := _wedged(request):
        return JSONResponse({"status": "stalled", "error": why, "version": __version__}, status_code=503)
    return JSONResponse({"status": "alive", "version": __version__})


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
