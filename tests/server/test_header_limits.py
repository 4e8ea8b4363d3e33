"""A request head over the server's 64 KiB (serve.MAX_HEADER_BYTES) gets a 431 with a JSON error,
and one that is not HTTP a JSON 400, instead of a dropped connection: the answer is written, then
the rest of what the client sends is read and dropped until it has read the answer and closed
(ocr_server/http/connections.py). Before, the server closed with the client's megabyte unread,
and the reset lost its answer."""

from __future__ import annotations

import json
import select
import socket
import time

import httpx
import pytest

from ocr_server.http.server import MAX_HEADER_BYTES

from . import samples

pytestmark = pytest.mark.server


def _until_closed(s: socket.socket, seconds: float) -> bytes:
    data, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not select.select([s], [], [], 0.1)[0]:
            continue
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _error(response: httpx.Response) -> dict:
    assert response.headers["content-type"] == "application/json", response.headers
    return response.json()["error"]


def test_a_megabyte_authorization_header_is_answered_431_with_json(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        answer = c.post("/v1/ocr", headers={"Authorization": "Bearer " + "a" * 1_000_000},
                        files={"file": ("p.png", samples.png(80, 60, seed=2), "image/png")})
    assert answer.status_code == 431, answer.text
    error = _error(answer)
    assert error["type"] == "headers_too_large" and error["code"] == 431 and str(MAX_HEADER_BYTES) in error["message"]
    assert answer.headers["connection"] == "close"


def test_a_head_just_over_the_limit_is_431_and_one_just_under_is_served(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        over = c.get("/health", headers={"X-Padding": "p" * (MAX_HEADER_BYTES + 100)})
        under = c.get("/health", headers={"X-Padding": "p" * (MAX_HEADER_BYTES - 1024)})
    assert over.status_code == 431 and _error(over)["type"] == "headers_too_large", over.text
    assert under.status_code == 200, under.text


def test_a_request_that_is_not_http_is_a_json_400_and_the_connection_closes(server):
    with socket.create_connection(server.address, timeout=10) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = _until_closed(s, 10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"connection: close" in head.lower(), answer[:300]
    assert json.loads(body)["error"]["type"] == "invalid_input"


def test_a_client_that_keeps_sending_after_its_431_is_cut_within_the_linger_bound(server):
    """The rest of a refused head is read and dropped only for a bounded time: a client that never
    stops sending (10 KB every 0.1 s), even after it has read its 431 and the server's end of
    writing, has its connection closed within LINGER_SECONDS (its next send then fails)."""
    from ocr_server.http.connections import LINGER_SECONDS

    with socket.create_connection(server.address, timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: t\r\nX-Padding: " + b"p" * (MAX_HEADER_BYTES + 1024))
        t0, answer, cut = time.monotonic(), b"", False
        while time.monotonic() - t0 < LINGER_SECONDS + 5:
            try:
                if select.select([s], [], [], 0.1)[0]:
                    answer += s.recv(65536)  # the answer, then b"" at the server's end of writing
                s.sendall(b"p" * 10_000)
                time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
        elapsed = time.monotonic() - t0
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:300]
    assert cut and LINGER_SECONDS - 1 <= elapsed < LINGER_SECONDS + 3, (cut, elapsed)


def test_the_server_serves_others_after_refused_heads(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for _ in range(3):
            assert c.get("/health", headers={"X-Padding": "p" * 200_000}).status_code == 431
        good = c.post("/v1/ocr", files={"file": ("p.png", samples.png(80, 60, seed=8), "image/png")})
    assert good.status_code == 200, good.text
