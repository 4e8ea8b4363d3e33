"""uvicorn's h11 protocol with a deadline on each request head and a cap on open connections.

uvicorn bounds a request head in size (h11's buffer, serve.MAX_HEADER_BYTES) but not in time: its
keep-alive timer stops at a connection's first byte, so a client that sends a header byte a second
holds the connection, and what it sent, for as long as it likes; enough of them exhaust the
server's sockets (slowloris). This protocol gives each head HEADER_TIMEOUT_SEC from the
connection's opening or, on a kept-alive connection, from the next request's first byte. Past it
the client gets a 408 (`header_timeout`) and the connection closes.

A connection past MAX_CONNECTIONS is closed as soon as it opens, before anything is read: the
server's memory and file descriptors stay bounded, and nothing is answered 5xx. Connections that
send nothing leave within the keep-alive timeout or the head deadline, so the cap is reached only by
a flood, and frees up again on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("ocr_server")


def header_timeout_response(timeout: float) -> bytes:
    """The whole 408 answer, written raw: no request was read, so h11 has nothing to answer."""
    body = json.dumps({"error": {
        "type": "header_timeout", "status": 408,
        "message": f"the request line and headers did not arrive within {timeout:g} s (HEADER_TIMEOUT_SEC)"}},
        separators=(",", ":")).encode()
    head = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n")
    return head + body


def bounded_h11_protocol(header_timeout: float, max_connections: int) -> type[H11Protocol]:
    """An H11Protocol class with these bounds (uvicorn builds one instance per connection)."""

    class BoundedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                log.warning("connection from %s closed unread: %d connections open (MAX_CONNECTIONS=%d)",
                            self.client, len(self.connections) - 1, max_connections)
                transport.close()
                return
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            if self._head_timer is None and self.conn.their_state is h11.IDLE:
                self._arm_head_timer()  # the first byte of a kept-alive connection's next request
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._cancel_head_timer()  # the head is in (or the connection failed)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            log.info("connection from %s closed: no complete request head within %g s", self.client, header_timeout)
            self.transport.write(header_timeout_response(header_timeout))
            self.transport.close()

    return BoundedH11Protocol
