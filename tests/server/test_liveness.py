"""A wedged engine fails /health/live so the kubelet restarts the pod (stand-in engine: its
generate blocks for a set time, which a real model cannot be made to do on cue)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from . import samples
from .conftest import start_server

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def blocking(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("wedged"), {
        # TIMEOUT_SEC 3: the page reaches the engine before its deadline also on a busy machine (at 1 s
        # a first request once ended in its upload and decoding, and the engine never owed work).
        "CONCURRENCY": "1", "BATCH_WAIT_MS": "0", "STAND_IN_GENERATE_SEC": "6", "TIMEOUT_SEC": "3",
        "LIVENESS_STALL_SEC": "2",
    }, module="ocr_server_testing.stand_in", timeout=60)
    yield server
    server.stop()


def test_liveness_fails_while_the_engine_is_stuck_past_the_bound_and_recovers_after(blocking):
    assert httpx.get(blocking.url + "/health/live").status_code == 200
    answer: list[httpx.Response] = []
    poster = threading.Thread(target=lambda: answer.append(httpx.post(
        blocking.url + "/v1/ocr", files={"file": ("p.png", samples.png(64, 64), "image/png")}, timeout=30)))
    t0 = time.monotonic()
    poster.start()
    seen: list[tuple[float, int]] = []
    while time.monotonic() - t0 < 10:
        seen.append((time.monotonic() - t0, blocking.get("/health/live").status_code))
        if seen[-1][1] == 200 and any(code == 503 for _, code in seen):
            break
        time.sleep(0.2)
    poster.join(30)
    assert answer and answer[0].status_code == 504  # the request itself ended at its deadline
    first_503 = next((t for t, code in seen if code == 503), None)
    assert first_503 is not None and 1.5 <= first_503 <= 4.5, (seen, blocking.get("/stand-in/stats").json())
    assert seen[-1][1] == 200, seen  # generate returned: progress, alive again
    body = httpx.get(blocking.url + "/health/live").json()
    assert body["status"] == "alive"


def test_readiness_and_liveness_say_why_while_stalled(blocking):
    poster = threading.Thread(target=lambda: httpx.post(
        blocking.url + "/v1/ocr", files={"file": ("p.png", samples.png(64, 64, seed=3), "image/png")}, timeout=30))
    poster.start()
    time.sleep(3)
    live, ready = httpx.get(blocking.url + "/health/live"), httpx.get(blocking.url + "/health")
    poster.join(30)
    assert live.status_code == 503 and ready.status_code == 503
    assert live.json()["status"] == "stalled" and "LIVENESS_STALL_SEC=2" in live.json()["error"]
    assert "no progress" in blocking.log()


def test_a_sigterm_with_the_engine_wedged_exits_at_once_instead_of_waiting_out_the_graceful_shutdown(tmp_path):
    """TIMEOUT_SEC 120 gives requests in flight 125 s after a SIGTERM; a wedged engine's never end,
    so the kubelet's restart of a pod failing liveness would wait that long for nothing. (A live
    engine keeps the graceful wait: test_shutdown.py.)"""
    server = start_server(tmp_path, {
        "CONCURRENCY": "1", "BATCH_WAIT_MS": "0", "STAND_IN_GENERATE_SEC": "60", "TIMEOUT_SEC": "120",
        "LIVENESS_STALL_SEC": "2",
    }, module="ocr_server_testing.stand_in", timeout=60)
    try:
        def post() -> None:  # its answer never comes: the server exits under it
            try:
                httpx.post(server.url + "/v1/ocr", files={"file": ("p.png", samples.png(64, 64, seed=5), "image/png")},
                           timeout=90)
            except httpx.HTTPError:
                pass

        threading.Thread(target=post, daemon=True).start()
        deadline = time.monotonic() + 20
        while server.get("/health/live").status_code != 503:
            assert time.monotonic() < deadline, "liveness never failed"
            time.sleep(0.2)
        t0 = time.monotonic()
        server.proc.terminate()
        code = server.proc.wait(30)
        assert time.monotonic() - t0 < 10 and code != 0
        assert "with the engine wedged: exiting without waiting" in server.log()
    finally:
        server.stop()


def test_the_fault_plugin_a_test_names_wedges_the_engine_on_cue_and_liveness_fails(tmp_path):
    """SERVER_PLUGINS loads the test suite's fault plugin into a real server process (the product
    holds no test code): a batch starting while the trigger file exists hangs the engine thread."""
    trigger = tmp_path / "ocr-wedge"
    server = start_server(tmp_path, {
        "CONCURRENCY": "1", "BATCH_WAIT_MS": "0", "STAND_IN_GENERATE_SEC": "0.05", "TIMEOUT_SEC": "2",
        "LIVENESS_STALL_SEC": "1", "SERVER_PLUGINS": "ocr_server_testing.faults", "OCR_WEDGE_FILE": str(trigger),
    }, module="ocr_server_testing.stand_in", timeout=60)
    try:
        page = {"file": ("p.png", samples.png(64, 64, seed=7), "image/png")}
        assert httpx.post(server.url + "/v1/ocr", files=page, timeout=30).status_code == 200  # no file: no fault
        trigger.touch()
        wedged = httpx.post(server.url + "/v1/ocr", files={"file": ("p.png", samples.png(64, 64, seed=8), "image/png")},
                            timeout=30)
        assert wedged.status_code == 504 and not trigger.exists()
        deadline = time.monotonic() + 10
        while server.get("/health/live").status_code != 503:
            assert time.monotonic() < deadline, "liveness never failed"
            time.sleep(0.2)
        log = server.log()
        assert "the wedge fault is armed" in log and "no progress" in log
    finally:
        server.stop()

