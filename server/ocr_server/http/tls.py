"""TLS handshakes inside the server's connection bounds.

Given `ssl=`, the event loop (asyncio's or uvloop's) runs a connection's TLS handshake before the
server's protocol hears of it, with the loop's own 60 s limit: a client that opens TCP and never
handshakes, or handshakes a byte at a time, is outside MAX_CONNECTIONS and the head deadline
(connections.py), and a flood of them holds the server's sockets. So the server listens in plain
TCP, and each accepted connection's protocol is a TLS layer around the h11 protocol: asyncio's
SSLProtocol, the one `create_server(ssl=...)` itself puts there. The connection is counted from
its accept, its handshake has TLS_HANDSHAKE_TIMEOUT_SEC, and the h11 protocol, with its head
deadline, takes over when the handshake ends. A renewed certificate loaded into the context
(runtime/credentials.py) is served to the next connection, as before.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from asyncio import sslproto
from typing import Any, Callable

from .connections import OpenConnections

log = logging.getLogger("ocr_server")


class CountedHandshake(sslproto.SSLProtocol):
    """One accepted connection's TLS layer: counted in `accepted` from its accept to its close,
    closed unread past the limit, cut `timeout` seconds after its accept if still handshaking."""

    def __init__(self, loop: asyncio.AbstractEventLoop, http: asyncio.Protocol, context: ssl.SSLContext,
                 timeout: float, accepted: OpenConnections) -> None:
        super().__init__(loop, http, context, None, server_side=True, ssl_handshake_timeout=timeout)
        self._http = http
        self._accepted = accepted
        self._admitted = False
        self._peer: Any = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._peer = transport.get_extra_info("peername")
        if not self._accepted.admit():
            log.warning("connection from %s closed unread: %d connections open (MAX_CONNECTIONS=%d)",
                        self._peer, self._accepted.open, self._accepted.limit)
            transport.close()
            return
        self._admitted = True
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            self._accepted.leave()
            if getattr(self._http, "transport", None) is None:  # the h11 protocol never got the connection
                log.info("connection from %s closed before its TLS handshake ended: %s", self._peer,
                         exc or "closed by the client")
        super().connection_lost(exc)


def tls_accepting(http_class: Any, context: ssl.SSLContext, timeout: float) -> Callable[..., asyncio.Protocol]:
    """A protocol factory for uvicorn (its `http` class's place) that wraps each h11 protocol of
    `http_class` (connections.bounded_h11_protocol, built with counted=True: this layer counts)
    in a CountedHandshake over `context`."""
    accepted: OpenConnections = http_class.accepted

    def create(**kwargs: Any) -> asyncio.Protocol:
        loop = asyncio.get_running_loop()
        return CountedHandshake(loop, http_class(counted=True, **kwargs), context, timeout, accepted)

    return create
