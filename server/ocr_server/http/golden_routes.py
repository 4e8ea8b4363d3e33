"""GET /v1/golden and GET /v1/golden/{name}: the quality gate's golden pages (serving/golden.py reads them).

The same API keys as /v1/ocr (a key whenever the server requires keys), and the quality gate's key
when addressed to this pod (gatekey.py); errors are JSON from the one error table.
"""

from __future__ import annotations

import asyncio
import hashlib

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ..runtime.errors import NotFound, OcrError
from ..serving.golden import EXPECTED_SUFFIX, NAME, Golden, read_golden
from .errors import error_response
from .routes import check_api_key

router = APIRouter()


async def _golden(request: Request) -> list[Golden]:
    check_api_key(request, gate=True)  # the same keys as /v1/ocr, and the gate's
    return await asyncio.to_thread(read_golden, request.app.state.golden_dir)


@router.get("/v1/golden")
async def listing(request: Request) -> Response:
    """The golden pages: name, size, sha256 and expected text of each."""
    try:
        pages = await _golden(request)
    except OcrError as exc:
        return error_response(exc)
    return JSONResponse({"pages": [p.to_json() for p in pages], "totalBytes": sum(len(p.data) for p in pages)})


@router.get("/v1/golden/{name}")
async def page(request: Request, name: str) -> Response:
    """One golden page's bytes."""
    try:
        if not NAME.match(name) or name.endswith(EXPECTED_SUFFIX):
            raise NotFound(f"{name!r} is no golden page's name", param="name")
        found = next((p for p in await _golden(request) if p.name == name), None)
        if found is None:
            raise NotFound(f"no golden page {name}", param="name")
    except OcrError as exc:
        return error_response(exc)
    return Response(found.data, media_type="application/octet-stream",
                    headers={"X-Content-SHA256": hashlib.sha256(found.data).hexdigest()})
