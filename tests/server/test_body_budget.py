"""MAX_INFLIGHT_BODY_BYTES: the bytes of request bodies the whole server holds at once, reserved
before a body is read. Requests beyond it get a 503 with Retry-After without their body being read,
while a small request still fits and is served (ocr_server/http/budget.py)."""

from __future__ import annotations

import base64
import json
import select
import socket
import time

import pytest

from . import samples
from .conftest import start_server

pytestmark = pytest.mark.server

MIB = 1024 * 1024
BUDGET = 3 * MIB
HELD = 1_000_000  # each of three slow uploads declares this much: 2,858,000 of the 3 MiB reserved


def _head(length: int | None) -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    return (f"POST /v1/ocr HTTP/1.1\r\nHost: t\r\nContent-Type: image/png\r\n{size}\r\n").encode()


def _answer(s: socket.socket, seconds: float) -> bytes:
    """What the server answers on `s` within `seconds`: up to the end of a JSON body with a length."""
    data, deadline = b"", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not select.select([s], [], [], 0.1)[0]:
            continue
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        if sep and length and len(body) >= length[0]:
            break
    return data


@pytest.fixture(scope="module")
def budget_server(tiny_native, tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("budget"), {
        "MODEL_PATH": str(tiny_native), "MAX_BODY_BYTES": str(MIB), "MAX_INFLIGHT_BODY_BYTES": str(BUDGET),
        "BODY_TIMEOUT_SEC": "30", "MAX_NEW_TOKENS": "4"})
    yield server
    server.stop()


@pytest.fixture
def three_slow_uploads(budget_server):
    """Three requests whose heads declare HELD bytes and whose bodies never come: 2,858,000 bytes of
    the budget are reserved while they are open."""
    held = [socket.create_connection(budget_server.address, timeout=10) for _ in range(3)]
    for s in held:
        s.sendall(_head(HELD) + b"\x89PNG")
    time.sleep(0.5)  # the server has read their heads and reserved their bodies
    yield held
    for s in held:
        s.close()


def test_a_body_beyond_the_budget_is_a_503_with_retry_after_before_it_is_sent_while_a_small_one_is_served(
        budget_server, three_slow_uploads):
    with socket.create_connection(budget_server.address, timeout=10) as s:
        t0 = time.monotonic()
        s.sendall(_head(HELD))  # the head only: the answer must come without the body
        answer = _answer(s, 5)
        waited = time.monotonic() - t0
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), answer[:300]
    assert waited < 3, waited
    retry = [line.split(b":")[1].strip() for line in head.split(b"\r\n") if line.lower().startswith(b"retry-after:")]
    assert retry and int(retry[0]) >= 1, head
    error = json.loads(body)["error"]
    assert error["type"] == "server_busy" and "MAX_INFLIGHT_BODY_BYTES" in error["message"], error

    page = samples.png(80, 60, seed=3)  # a few KB: fits in what the slow uploads left
    with budget_server.client() as c:
        small = c.post("/v1/ocr", files={"file": ("p.png", page, "image/png")})
    assert small.status_code == 200, small.text


def test_a_chunked_body_is_reserved_as_it_comes_and_refused_when_it_no_longer_fits(budget_server, three_slow_uploads):
    chunk = b"\0" * 400_000  # more than the 287,728 bytes the slow uploads left
    with socket.create_connection(budget_server.address, timeout=10) as s:
        s.sendall(_head(None) + f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        answer = _answer(s, 5)
    assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
    assert b'"type":"server_busy"' in answer


def test_the_budget_is_given_back_when_the_requests_holding_it_end(budget_server):
    """Three slow uploads held and then closed, three times over; then three more are held. The
    budget fits three and not one byte of a fourth's, so a single reservation left behind by an
    ended request would make the last three's third a 503: none is answered, they wait for their
    bodies."""
    for _ in range(3):
        held = [socket.create_connection(budget_server.address, timeout=10) for _ in range(3)]
        for s in held:
            s.sendall(_head(HELD))
        time.sleep(0.3)
        for s in held:
            s.close()
    time.sleep(0.5)
    held = [socket.create_connection(budget_server.address, timeout=10) for _ in range(3)]
    try:
        for s in held:
            s.sendall(_head(HELD))
        answers = [_answer(s, 1.5) for s in held]
    finally:
        for s in held:
            s.close()
    assert answers == [b"", b"", b""], [a[:200] for a in answers]


def test_a_budget_smaller_than_the_largest_body_stops_the_server_at_start(tiny_native, tmp_path):
    server = start_server(tmp_path, {"MODEL_PATH": str(tiny_native), "MAX_BODY_BYTES": str(MIB),
                                     "MAX_INFLIGHT_BODY_BYTES": str(MIB)}, wait_ready=False)
    try:
        assert server.proc.wait(60) == 2
        assert "MAX_INFLIGHT_BODY_BYTES=1048576 is not allowed" in server.log()
    finally:
        server.stop()


def test_within_the_budget_the_raw_and_json_forms_are_served_and_the_body_limit_still_answers_413(budget_server):
    page = samples.png(80, 60, seed=7)
    with budget_server.client() as c:
        raw = c.post("/v1/ocr", content=page, headers={"Content-Type": "image/png"})
        as_json = c.post("/v1/ocr", json={"image": base64.b64encode(page).decode()})
        too_large = c.post("/v1/ocr", content=b"\0" * (MIB + 1), headers={"Content-Type": "image/png"})
    assert raw.status_code == 200 and as_json.status_code == 200, (raw.text, as_json.text)
    assert raw.json()["text"] == as_json.json()["text"]
    assert too_large.status_code == 413 and too_large.json()["error"]["type"] == "payload_too_large"
