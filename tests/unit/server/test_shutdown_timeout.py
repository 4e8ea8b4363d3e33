"""The graceful-shutdown timeout follows the request timeout: TIMEOUT_SEC + 5."""

from __future__ import annotations

from ocr_server.runtime.config import load_config
from ocr_server.http.server import uvicorn_options
from ocr_server.runtime.timeouts import GRACEFUL_SHUTDOWN_MARGIN_SEC, graceful_shutdown_seconds


def test_graceful_shutdown_is_the_request_timeout_plus_five_seconds():
    assert GRACEFUL_SHUTDOWN_MARGIN_SEC == 5
    assert graceful_shutdown_seconds(30) == 35 and graceful_shutdown_seconds(3600) == 3605


def test_uvicorn_is_given_the_derived_graceful_shutdown_timeout():
    assert uvicorn_options(load_config(env={}))["timeout_graceful_shutdown"] == 35
    assert uvicorn_options(load_config(env={"TIMEOUT_SEC": "120"}))["timeout_graceful_shutdown"] == 125


def test_uvicorn_is_given_the_address_and_tls_settings():
    opts = uvicorn_options(load_config(env={"HOST": "127.0.0.1", "PORT": "9000"}))
    assert (opts["host"], opts["port"], opts["ssl_certfile"], opts["access_log"]) == ("127.0.0.1", 9000, None, False)
