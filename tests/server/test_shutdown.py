"""SIGTERM while a request is in flight: the server stops taking new connections and lets the
request finish, for up to TIMEOUT_SEC + 5 s (stand-in engine: its generate takes a set time, longer
than uvicorn's 10 s default grace)."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

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
