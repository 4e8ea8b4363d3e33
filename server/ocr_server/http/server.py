"""uvicorn with the server's settings: address, TLS, log level and the graceful-shutdown timeout.

One place, so that `python -m ocr_server` and the test stand-in shut down the same way.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from fastapi import FastAPI

from ..runtime.config import ServerConfig
from ..runtime.liveness import is_wedged
from ..runtime.timeouts import graceful_shutdown_seconds
from .connections import bounded_h11_protocol
from .tls import tls_accepting

log = logging.getLogger("ocr_server")


# The request line and headers of one request, at most: beyond, h11 refuses the head and the
# protocol answers 431 (connections.py; httptools, uvicorn's default parser when installed, keeps
# headers of any size: a megabyte of them was read and served).
MAX_HEADER_BYTES = 64 * 1024


def uvicorn_options(cfg: ServerConfig) -> dict[str, Any]:
    """On SIGTERM uvicorn stops accepting and waits for requests in flight: as long as one may run
    (TIMEOUT_SEC) plus a margin (timeouts.graceful_shutdown_seconds), then cancels what is left.
    HTTP is parsed by h11; the protocol (connections.py) bounds a request's head in size
    (MAX_HEADER_BYTES, with h11's buffer bound) and in time (HEADER_TIMEOUT_SEC), and the open
    connections in number (MAX_CONNECTIONS)."""
    s = cfg.service
    return {"host": s.host, "port": s.port, "log_level": s.log_level, "access_log": False,
            "timeout_graceful_shutdown": graceful_shutdown_seconds(cfg.runtime.timeout_sec),
            "ssl_certfile": s.tls_cert_file, "ssl_keyfile": s.tls_key_file,
            "http": bounded_h11_protocol(s.header_timeout_sec, s.max_connections, MAX_HEADER_BYTES),
            "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


def engine_wedged(app: FastAPI, cfg: ServerConfig) -> bool:
    """Whether /health/live fails now: the engine owes work and has made no progress for
    LIVENESS_STALL_SEC. False while the model loads (the runner is not started yet)."""
    bound = cfg.runtime.liveness_stall_sec
    return bound is not None and is_wedged(app.state.service.engine_stalled_for(), bound)


def serve(app: FastAPI, cfg: ServerConfig, **overrides: Any) -> None:
    """uvicorn.run's steps, with its SSLContext handed to the app (app.state.tls_context) before it
    starts: runtime/credentials.py loads a renewed certificate into that context. The TLS handshake
    is the protocol's (tls.py), not the loop's: uvicorn listens in plain TCP, so that a connection
    is counted from its accept and its handshake bounded by TLS_HANDSHAKE_TIMEOUT_SEC.

    A SIGTERM that finds the engine wedged skips the graceful wait: the requests in flight would
    never finish, and the wait is TIMEOUT_SEC + 5 s (up to an hour) that the kubelet's restart of a
    pod failing liveness would otherwise spend before its SIGKILL."""
    import uvicorn
    from uvicorn.main import STARTUP_FAILURE

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            if not self.force_exit and engine_wedged(app, cfg):
                log.warning("signal %d with the engine wedged: exiting without waiting for the requests "
                            "in flight (they cannot finish)", sig)
                self.force_exit = self.wedged_exit = True

        def _log_started_message(self, listeners: Any) -> None:
            self.config.ssl = app.state.tls_context  # "running on https://..." when it is
            try:
                super()._log_started_message(listeners)
            finally:
                self.config.ssl = None

        wedged_exit = False

    config = uvicorn.Config(app, **{**uvicorn_options(cfg), **overrides})
    config.load()
    app.state.tls_context = config.ssl
    if config.ssl is not None:
        config.http_protocol_class = tls_accepting(config.http_protocol_class, config.ssl,
                                                   cfg.service.tls_handshake_timeout_sec)
        config.ssl = None
    server = Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:  # as uvicorn.run: the port could not be bound
        sys.exit(STARTUP_FAILURE)
    if server.wedged_exit:
        # The interpreter's exit would join the engine's worker thread, which never returns.
        logging.shutdown()
        os._exit(1)
