"""The OcrService's HTTP API as the worker uses it: one request per part, marked as batch traffic.

Thin: it sends and returns what came back (status, body, Retry-After); retry.decide says what to
do with it. Every request carries `X-Request-Class: batch`, so the server serves interactive
requests first and sheds batch ones with 429 + Retry-After when its queue is long.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

import aiohttp

from ocr_limits.request_classes import BATCH, HEADER

from .documents import OCR, Part

REQUEST_CLASS = (HEADER, BATCH)
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a page's JSON answer (text, blocks) is far smaller


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: no answer (connection refused or reset, timeout)
    body: bytes
    retry_after: str | None
    reason: str  # for the errors file: the server's message, or the transport error


def error_message(body: bytes) -> str:
    """The server's {"error": {"message"}} text, or the start of the body."""
    import json

    try:
        return str(json.loads(body)["error"]["message"])[:2000]
    except (ValueError, KeyError, TypeError):
        return body[:300].decode("utf-8", "replace")


class OcrClient:
    def __init__(self, base_url: str, *, concurrency: int, timeout: float, api_key: str | None = None,
                 ca_file: str | None = None, server_name: str | None = None) -> None:
        self.base_url = base_url
        # HTTPS to a Service's cluster IP: the certificate is checked against the Service's DNS name.
        self.extra = {"server_hostname": server_name} if server_name else {}
        self.headers = {REQUEST_CLASS[0]: REQUEST_CLASS[1]}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        ssl_context = ssl.create_default_context(cafile=ca_file) if ca_file else None
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=concurrency, ssl=ssl_context if ssl_context else True),
            timeout=aiohttp.ClientTimeout(total=timeout))

    async def close(self) -> None:
        await self.session.close()

    async def send(self, part: Part, options: dict[str, str]) -> Answer:
        if part.endpoint == OCR:
            form = aiohttp.FormData()
            form.add_field("file", part.body, content_type=part.content_type, filename=f"page-{part.page}")
            for name, value in options.items():
                form.add_field(name, value)
            if part.pages:
                form.add_field("pages", part.pages)
            data, headers = form, self.headers
        else:
            data, headers = part.body, {**self.headers, "Content-Type": part.content_type}
        try:
            async with self.session.post(self.base_url + part.endpoint, data=data, headers=headers,
                                         **self.extra) as resp:
                body = bytearray()
                async for chunk in resp.content.iter_chunked(1 << 16):
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        return Answer(None, b"", None, f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
                reason = "" if resp.status == 200 else error_message(bytes(body))
                return Answer(resp.status, bytes(body), resp.headers.get("Retry-After"), reason)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            return Answer(None, b"", None, f"{type(exc).__name__}: {exc}"[:500] or type(exc).__name__)
