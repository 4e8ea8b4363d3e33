"""SIGTERM while a request is in flight: the server stops taking new connections and lets the
request finish, for up to TIMEOUT_SEC + 5 s (stand-in engine: its generate takes a set time, longer
than uvicorn's 10 s default grace). An idle kept-alive connection drains: a request sent on it just
after the signal is still answered, told to close (http/connections.py)."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from ocr_server.http.connections import DRAIN_SECONDS

from . import samples
from .conftest import start_server

pytestmark = pytest.mark.server


def test_a_request_in_flight_at_sigterm_still_completes(tmp_path):
    server = start_server(tmp_path, {"CONCURRENCY": "1", "BATCH_WAIT_MS": "0", "STAND_IN_GENERATE_SEC": "12",
                                     "TIMEOUT_SEC": "20"}, module="ocr_server_testing.stand_in", timeout=60)
    try:
        answer: list[httpx.Response | Exception] = []

        def post() -> None:
            try:
                answer.append(httpx.post(server.url + "/v1/ocr", timeout=60,
                                         files={"file": ("p.png", samples.png(64, 64), "image/png")}))
            except httpx.HTTPError as exc:
                answer.append(exc)

        poster = threading.Thread(target=post)
        poster.start()
        time.sleep(1.0)
        server.proc.send_signal(signal.SIGTERM)
        poster.join(60)
        assert answer and isinstance(answer[0], httpx.Response), answer
        assert answer[0].status_code == 200 and answer[0].json()["raw"] == "stand-in output"
        assert server.proc.wait(15) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    finally:
        if server.proc.poll() is None:
            server.proc.kill()


@pytest.fixture
def quick(tmp_path):
    server = start_server(tmp_path, {"CONCURRENCY": "1", "BATCH_WAIT_MS": "0", "STAND_IN_GENERATE_SEC": "0.05",
                                     "TIMEOUT_SEC": "20"}, module="ocr_server_testing.stand_in", timeout=60)
    yield server
    if server.proc.poll() is None:
        server.proc.kill()


def page(seed: int) -> dict:
    return {"file": ("p.png", samples.png(64, 64, seed=seed), "image/png")}


def test_a_request_on_a_kept_alive_connection_just_after_sigterm_is_answered_and_told_to_close(quick):
    """The request a client sends as the pod stops (its kept-alive connection idle at the signal)
    is answered; uvicorn alone closed that connection at once and the request was lost."""
    with httpx.Client(base_url=quick.url, timeout=30) as client:
        first = client.post("/v1/ocr", files=page(1))
        assert first.status_code == 200 and first.headers.get("connection") != "close"
        quick.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # the listener is closed by now: only the kept-alive connection can answer
        last = client.post("/v1/ocr", files=page(2))
    assert last.status_code == 200 and last.headers["connection"] == "close"
    assert quick.proc.wait(15) in (0, -signal.SIGTERM)


def test_a_connection_idle_through_the_drain_is_closed_and_the_server_exits(quick):
    with httpx.Client(base_url=quick.url, timeout=30) as client:
        assert client.post("/v1/ocr", files=page(3)).status_code == 200
        t0 = time.monotonic()
        quick.proc.send_signal(signal.SIGTERM)
        assert quick.proc.wait(15) in (0, -signal.SIGTERM)
    took = time.monotonic() - t0
    assert DRAIN_SECONDS <= took < DRAIN_SECONDS + 3, took  # the drain ended it, not the 5 s keep-alive timer
