"""OcrError -> the JSON answer: status, body ({"error": {message, type, code, param}}) and headers.

One mapping for plain answers and for errors inside a stream (sse.py); unknown exceptions become a
500 without details.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

from ..runtime.errors import BodyTimeout, OcrError, Unauthorized


def error_body(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """(status, body) of any exception: an OcrError says what it is, anything else is a bare 500."""
    if isinstance(exc, OcrError):
        return exc.status, {"error": {"message": exc.message, "type": exc.type, "code": exc.status, "param": exc.param}}
    return 500, {"error": {"message": "internal server error", "type": "internal_error", "code": 500, "param": None}}


def error_response(exc: BaseException) -> JSONResponse:
    """Map any exception to a JSON error answer, with Retry-After, WWW-Authenticate and Connection where due."""
    status, body = error_body(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, OcrError) and exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, Unauthorized):
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(exc, BodyTimeout):  # the rest of the body may still come: never parse it as a request
        headers["Connection"] = "close"
    return JSONResponse(body, status_code=status, headers=headers or None)


def raw_answer(exc: OcrError) -> bytes:
    """The whole HTTP/1.1 answer to `exc`, with `connection: close`, for the protocol to write itself
    (http/connections.py) where no request was parsed for the app to answer: a head too slow, too
    large or not HTTP. The body is error_body's, as every other error."""
    status, body = error_body(exc)
    data = json.dumps(body, separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"connection: close\r\ncontent-length: {len(data)}\r\n\r\n")
    return head.encode() + data
