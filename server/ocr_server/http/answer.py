"""A /v1/ocr answer and what shadow pages (serving/shadow.py) take of it.

Before the answer is sent only the sampling decision runs (Shadow.consider: no copy of bytes, no
I/O); a sampled answer carries a background task that queues the copy, which Starlette runs after
the last byte is sent. The answer times its own sending, from the service's answer being ready to
its last byte handed to the connection (ocr_answer_send_seconds{shadow="sampled"|"none"}): what
shadow pages may add to a client's answer shows there.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from prometheus_client import Histogram
from starlette.background import BackgroundTask
from starlette.types import Message, Receive, Scope, Send

from ..serving.schema import OcrOptions, OcrResponse


class TimedAnswer(JSONResponse):
    """A JSON answer that observes, in `histogram`, the seconds from `ready` to its last body byte
    handed to the connection (before its background task runs)."""

    def __init__(self, content: Any, *, ready: float, histogram: Histogram, background: BackgroundTask | None = None) -> None:
        super().__init__(content, background=background)
        self.ready, self.histogram = ready, histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def timed(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                self.histogram.observe(time.monotonic() - self.ready)

        await super().__call__(scope, receive, timed)


def shadow_ticket(request: Request, gate: bool, *, stream: bool, status: int) -> object | None:
    """Shadow pages' decision on one /v1/ocr answer (counted while armed): a ticket when it is to
    be copied, else None. `gate`: the request came with the quality gate's key."""
    shadow = getattr(request.app.state, "shadow", None)
    return None if shadow is None else shadow.consider(request.headers, gate=gate, stream=stream, status=status)


def ocr_answer(request: Request, result: OcrResponse, data: bytes, opts: OcrOptions, *, gate: bool,
               ready: float) -> TimedAnswer:
    """The 200 answer to a whole (not streamed) /v1/ocr request; `ready`: when the service answered."""
    state = request.app.state
    ticket = shadow_ticket(request, gate, stream=False, status=200)
    background = BackgroundTask(state.shadow.enqueue, ticket, data, opts, result) if ticket is not None else None
    return TimedAnswer(result.model_dump(), ready=ready, background=background,
                       histogram=state.metrics.answer_send.labels("sampled" if ticket is not None else "none"))
