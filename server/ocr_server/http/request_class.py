"""The X-Request-Class header: interactive (the default) or batch (engines/scheduling.py says what each gets).

A bad value, or the header sent twice, is a 400 naming the header; the class is kept on
request.state for the request counter either way.
"""

from __future__ import annotations

from fastapi import Request

from ocr_limits.request_classes import BATCH, CLASSES, HEADER, INTERACTIVE

from ..runtime.errors import BadInput

_SHOWN = 40  # characters of a bad header value quoted back
# The header in the OpenAPI document of /v1/ocr and /v1/chat/completions (the routes read it themselves).
OPENAPI_PARAMETERS = [{
    "name": HEADER, "in": "header", "required": False,
    "schema": {"type": "string", "enum": list(CLASSES), "default": INTERACTIVE},
    "description": "interactive (default): started before any waiting batch request; batch: shed first "
                   "(429 with Retry-After) once BATCH_QUEUE_THRESHOLD requests wait",
}]


def parse_request_class(value: str | None) -> str:
    """The class a header value names; absent is interactive. Anything else is a 400 naming the header."""
    if value is None:
        return INTERACTIVE
    word = value.strip().lower()
    if word in CLASSES:
        return word
    shown = value[:_SHOWN] + ("..." if len(value) > _SHOWN else "")
    raise BadInput(f"{HEADER}: {shown!r} is not a request class; use {INTERACTIVE} (the default) or {BATCH}",
                   param=HEADER)


def read_request_class(request: Request) -> str:
    """The request's class from X-Request-Class, kept on request.state for the request counter; a
    refused header is a 400 and counts as the default class."""
    request.state.request_class = INTERACTIVE
    values = request.headers.getlist(HEADER)
    if len(values) > 1:
        raise BadInput(f"{HEADER}: given {len(values)} times; send it once", param=HEADER)
    request.state.request_class = parse_request_class(values[0] if values else None)
    return request.state.request_class
