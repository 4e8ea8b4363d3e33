"""uvicorn with the server's settings: address, TLS, log level and the graceful-shutdown timeout.

One place, so that `python -m ocr_server` and the test stand-in shut down the same way.
"""

from __future__ import annotations

import sys
from typing import Any

from .config import ServerConfig
from .timeouts import graceful_shutdown_seconds


# The request line and headers of one request, at most: h11 answers 400 beyond (httptools, uvicorn's
# default parser when installed, keeps headers of any size: a megabyte of them was read and served).
MAX_HEADER_BYTES = 64 * 1024


def uvicorn_options(cfg: ServerConfig) -> dict[str, Any]:
    """On SIGTERM uvicorn stops accepting and waits for requests in flight: as long as one may run
    (TIMEOUT_SEC) plus a margin (timeouts.graceful_shutdown_seconds), then cancels what is left.
    HTTP is parsed by h11, whose buffer bound caps a request's head at MAX_HEADER_BYTES; the
    protocol (http_protocol.py) bounds the head in time (HEADER_TIMEOUT_SEC) and the open
    connections in number (MAX_CONNECTIONS)."""
    from .http_protocol import bounded_h11_protocol

    s = cfg.service
    return {"host": s.host, "port": s.port, "log_level": s.log_level, "access_log": False,
            "timeout_graceful_shutdown": graceful_shutdown_seconds(cfg.runtime.timeout_sec),
            "ssl_certfile": s.tls_cert_file, "ssl_keyfile": s.tls_key_file,
            "http": bounded_h11_protocol(s.header_timeout_sec, s.max_connections),
            "h11_max_incomplete_event_size": MAX_HEADER_BYTES}


def serve(app: Any, cfg: ServerConfig, **overrides: Any) -> None:
    """uvicorn.run's steps, with its SSLContext handed to the app (app.state.tls_context) before it
    starts: reload.py loads a renewed certificate into that context."""
    import uvicorn
    from uvicorn.main import STARTUP_FAILURE

    config = uvicorn.Config(app, **{**uvicorn_options(cfg), **overrides})
    config.load()
    app.state.tls_context = config.ssl
    server = uvicorn.Server(config)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    if not server.started:  # as uvicorn.run: the port could not be bound
        sys.exit(STARTUP_FAILURE)
