"""Server-sent events: framing, and the one wrapper that turns a request's events into a response body.

The wrapper owns what every stream needs: the request counter and latency are recorded when the
stream ends (with the status of its error event, if any), an error after the headers went out
becomes an event instead of a traceback, and a client that goes away closes the request's
generator at once, which cancels its rows in the running batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Iterable

from fastapi import Request
from fastapi.responses import StreamingResponse

from ..runtime.errors import OcrError
from ..serving.events import Event
from .errors import error_body

log = logging.getLogger("ocr_server.sse")
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def frame(data: Any, event: str | None = None) -> bytes:
    """One event: optional `event:` line, one `data:` line of JSON (or a literal like [DONE])."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def stream_response(
    request: Request,
    events: AsyncGenerator[Event, None],
    render: Callable[[Event], Iterable[bytes]],
    render_error: Callable[[dict[str, Any]], Iterable[bytes]],
    *,
    endpoint: str,
    start: float,
    head: Iterable[bytes] = (),
) -> StreamingResponse:
    """A text/event-stream response: `head` at once, then `events` (already past Started) framed by `render`."""
    state = request.app.state

    async def body() -> AsyncIterator[bytes]:
        status = 200
        try:
            for chunk in head:
                yield chunk
            async for event in events:
                for chunk in render(event):
                    yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            status = 499  # client closed the request (nginx's code); its rows are cancelled below
            state.metrics.stream_disconnects.inc()
            raise
        except Exception as exc:  # noqa: BLE001 - the headers are gone: report inside the stream
            if not isinstance(exc, OcrError):
                log.exception("unexpected error in a stream of %s", endpoint)
            status, payload = error_body(exc)
            for chunk in render_error(payload):
                yield chunk
        finally:
            await events.aclose()
            state.metrics.requests.labels(endpoint, str(status), request.state.request_class).inc()
            state.metrics.latency.observe(time.monotonic() - start)

    return StreamingResponse(body(), media_type="text/event-stream", headers=HEADERS)
