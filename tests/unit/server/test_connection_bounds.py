"""The pure parts of the server's connection and body bounds: what counts as a head too large,
the connection count, and the body budget's reservations (the real-server tests are in
tests/server/test_header_limits.py, test_tls_handshake.py and test_body_budget.py)."""

from __future__ import annotations

import json

import pytest

from ocr_server.http.budget import BodyBudget, BodyLease
from ocr_server.http.connections import OpenConnections, head_too_large, refused_head
from ocr_server.http.errors import raw_answer
from ocr_server.runtime.errors import BodyBudgetFull, HeadersTooLarge


def test_a_head_is_too_large_when_its_end_is_not_within_the_limit_even_if_it_arrived_whole():
    head = b"GET / HTTP/1.1\r\nX-Padding: " + b"p" * 200 + b"\r\n\r\n"
    assert not head_too_large(head, len(head))
    assert head_too_large(head, len(head) - 10)  # complete, but longer than the limit
    assert not head_too_large(head + b"body" * 100_000, len(head))  # a body after a short head
    assert head_too_large(b"p" * 101, 100) and not head_too_large(b"p" * 100, 100)


def test_a_refused_head_is_431_when_too_large_and_400_otherwise_with_the_api_error_shape():
    large, bad = refused_head(b"p" * 70_000, 65_536), refused_head(b"NOT HTTP\r\n\r\n", 65_536)
    assert isinstance(large, HeadersTooLarge) and large.status == 431 and bad.status == 400
    head, _, body = raw_answer(large).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n") and b"connection: close" in head
    assert json.loads(body) == {"error": {"message": large.message, "type": "headers_too_large", "code": 431,
                                          "param": None}}
    assert int(head.split(b"content-length: ")[1].split(b"\r\n")[0]) == len(body)


def test_connections_are_admitted_up_to_the_limit_and_free_it_when_they_leave():
    count = OpenConnections(2)
    assert count.admit() and count.admit() and not count.admit()
    count.leave()
    assert count.admit() and count.open == 2


def test_a_lease_reserves_within_the_budget_refuses_past_it_and_gives_everything_back():
    budget = BodyBudget(100)
    first, second = BodyLease(budget), BodyLease(budget)
    first.reserve(60, retry_after=3)
    first.reserve(0, retry_after=3)
    with pytest.raises(BodyBudgetFull) as refused:
        second.reserve(41, retry_after=3)
    assert refused.value.status == 503 and refused.value.retry_after == 3 and "MAX_INFLIGHT_BODY_BYTES=100" in (
        refused.value.message)
    second.reserve(40, retry_after=3)  # a refusal reserved nothing
    assert budget.held == 100
    first.release()
    second.release()
    second.release()  # twice: nothing more given back
    assert budget.held == 0
