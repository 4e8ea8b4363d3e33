"""PUT, GET and DELETE /v1/shadow: the quality gate arms, reads and disarms shadow pages on a
serving pod (serving/shadow.py).

Only the gate's key (Authorization: Bearer, from GATE_KEY_FILE) on a request addressed to the pod
itself (gatekey.py) is taken, never an API key (401). A server without GATE_KEY_FILE or POD_IP has
no shadow pages: 404 shadow_unavailable. Errors are JSON from the one error table.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from ..runtime.errors import InvalidOptions, OcrError, ShadowUnavailable, Unauthorized
from ..serving.shadow import Shadow, ShadowArm
from .bodies import parse_json
from .errors import error_response
from .gatekey import bearer
from .routes import error_param, explain, is_gate_key, read_body

router = APIRouter()
MAX_ARM_BYTES = 4096  # PUT /v1/shadow's JSON body


def _gate(request: Request) -> tuple[Shadow, str]:
    """The server's shadow pages and the gate's key the request came with, or why not."""
    shadow: Shadow | None = getattr(request.app.state, "shadow", None)
    if shadow is None:
        raise ShadowUnavailable("this server has no shadow pages: they need the quality gate's key file "
                                "(GATE_KEY_FILE) and the pod's IP (POD_IP), as the operator sets them")
    key = bearer(request.headers.get("authorization", ""))
    if not is_gate_key(request, key):
        raise Unauthorized("shadow pages take only the quality gate's key, on a request to the pod's own IP")
    return shadow, key


async def _gated(request: Request, action: Callable[[Shadow, str], Awaitable[dict[str, Any]]]) -> Response:
    """`action` on the server's shadow pages, for the gate only; its report as the answer."""
    try:
        shadow, key = _gate(request)
        return JSONResponse(await action(shadow, key))
    except OcrError as exc:
        return error_response(exc)


async def _settings(request: Request) -> ShadowArm:
    payload = parse_json(await read_body(request, MAX_ARM_BYTES))
    if not isinstance(payload, dict):
        raise InvalidOptions('the body must be a JSON object like {"id": ..., "target": ...}')
    try:
        return ShadowArm.model_validate(payload)
    except ValidationError as exc:
        raise InvalidOptions(explain(exc), param=error_param(exc)) from None


@router.put("/v1/shadow")
async def arm(request: Request) -> Response:
    """Arm: copy a sample of live /v1/ocr requests to `target`, replacing any earlier arm and its results."""

    async def action(shadow: Shadow, key: str) -> dict[str, Any]:
        return await shadow.arm(await _settings(request), key)

    return await _gated(request, action)


@router.get("/v1/shadow")
async def report(request: Request) -> Response:
    """The arm's counts and each copy's record: hashes, distances, outcomes; never a text."""

    async def action(shadow: Shadow, _key: str) -> dict[str, Any]:
        return shadow.report()

    return await _gated(request, action)


@router.delete("/v1/shadow")
async def disarm(request: Request) -> Response:
    """Disarm: the queue dropped, the copy in flight cancelled; the final report, then forgotten."""
    return await _gated(request, lambda shadow, _key: shadow.disarm())
