"""uvicorn's h11 protocol with a deadline on each request head, a cap on open connections counted
at accept, and an answer to a head the server will not read.

uvicorn bounds a request head in size (h11's buffer, serve.MAX_HEADER_BYTES) but not in time: its
keep-alive timer stops at a connection's first byte, so a client that sends a header byte a second
holds the connection, and what it sent, for as long as it likes; enough of them exhaust the
server's sockets (slowloris). This protocol gives each head HEADER_TIMEOUT_SEC from the
connection's opening or, on a kept-alive connection, from the next request's first byte. Past it
the client gets a 408 (`header_timeout`) and the connection closes.

A connection past MAX_CONNECTIONS is closed as soon as it is accepted, before anything is read:
the server's memory and file descriptors stay bounded, and nothing is answered 5xx. Connections
that send nothing leave within the keep-alive timeout, the head deadline or, with TLS, the
handshake deadline (tls.py, which counts a connection from its accept, before its handshake), so
the cap is reached only by a flood, and frees up again on its own.

A head h11 refuses gets a JSON answer, not uvicorn's text one: 431 (`headers_too_large`) for a
head over MAX_HEADER_BYTES, 400 for one that is not HTTP/1.1. Closing at once would lose it: the
client is usually still sending (a 1 MB Authorization header), and a close with unread data resets
the connection, which discards the answer before the client reads it. So the answer is followed by
a lingering close, as nginx and Apache do: the rest of what the client sends is read and dropped,
for LINGER_SECONDS and LINGER_BYTES at most, and the connection closes when the client closes or a
bound is reached.

The same lingering close follows any answer the server gives while the client is still sending
its body (a 408 for a body slower than BODY_TIMEOUT_SEC, a 413 for one declared too large): uvicorn
closed the connection at once, and a body byte arriving as it closed reset it, the answer lost
(the 408 to a client sending a byte a second: 1 in 32 on a busy machine, 0 in 64 lingering;
http.client sending a body declared too large: reset under its writes every time, before the 413).
And it follows the 408 to a head past HEADER_TIMEOUT_SEC, whose client is by definition still
sending: closed at once, some of sixteen clients sending a head byte every 5 ms were reset in
every run, none lingering.

On SIGTERM (a scale-down, a rollout) uvicorn closes every idle kept-alive connection at once. A
client that has just sent its next request on one, still unread by the server, gets no answer
("server disconnected"), most likely the one request a real-node scale-down test once lost. Here an idle
connection drains instead: for DRAIN_SECONDS its next request is still served, with `connection:
close`, so the client's next one opens a new connection (to a pod that stays, the endpoint being
gone by then); a connection still idle after that is closed, as the keep-alive timeout would.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ..runtime.errors import BadInput, HeadersTooLarge, HeaderTimeout, OcrError
from .errors import raw_answer

log = logging.getLogger("ocr_server")

# After a refused head: how long, and how many bytes, the rest of the client's sending is read and
# dropped before the connection is closed anyway.
LINGER_SECONDS = 5.0
LINGER_BYTES = 16 * 1024 * 1024
# After SIGTERM: how long an idle kept-alive connection still takes one last request (well inside
# the graceful-shutdown margin, timeouts.graceful_shutdown_seconds, which that request's run needs).
DRAIN_SECONDS = 1.0
CLOSE = (b"connection", b"close")


class OpenConnections:
    """The connections a server holds, counted from their accept (one per server, shared by its
    protocol instances: uvicorn's own set holds only the ones past a TLS handshake)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0

    def admit(self) -> bool:
        """Count a connection just accepted; False (and not counted) past the limit."""
        if self.open >= self.limit:
            return False
        self.open += 1
        return True

    def leave(self) -> None:
        self.open -= 1


def header_timeout_response(timeout: float) -> bytes:
    """The whole 408 answer, written raw: no request was read, so h11 has nothing to answer."""
    return raw_answer(HeaderTimeout(
        f"the request line and headers did not arrive within {timeout:g} s (HEADER_TIMEOUT_SEC)"))


def head_too_large(pending: bytes, max_head: int) -> bool:
    """Whether a request head that starts `pending` is longer than `max_head` bytes: its end (a blank
    line) is not within them. h11's own bound applies only to a head still incomplete after a read,
    so a larger head arriving in one read (up to 256 KiB) would pass it."""
    return len(pending) > max_head and pending.find(b"\r\n\r\n", 0, max_head + 4) == -1


def refused_head(pending: bytes, max_head: int) -> OcrError:
    """Why h11 refused a request head, from what it holds unparsed: more than `max_head` bytes with
    no end of head among them is a head too large (431); anything else is not HTTP/1.1 (400)."""
    if head_too_large(pending, max_head):
        return HeadersTooLarge(f"the request line and headers exceed {max_head} bytes, the most the server reads")
    return BadInput("the request is not valid HTTP/1.1")


def bounded_h11_protocol(header_timeout: float, max_connections: int, max_head: int) -> type[H11Protocol]:
    """An H11Protocol class with these bounds (uvicorn builds one instance per connection), `max_head`
    the bytes of a request line and headers (uvicorn's h11_max_incomplete_event_size too). Its
    `accepted` counts the server's connections; tls.py's handshake protocol counts the TLS ones
    itself and builds this class with `counted=True`."""
    accepted = OpenConnections(max_connections)

    class BoundedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _linger_timer: asyncio.TimerHandle | None = None
        _lingering = False
        _lingered = 0
        _admitted = False
        _head_bytes = 0  # received since the head began, while it is coming
        _head_checked = False  # its end was found within MAX_HEADER_BYTES
        _draining = False  # SIGTERM came: the next request is the connection's last

        def __init__(self, *args: object, counted: bool = False, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            self._counted_outside = counted
            self._max_head = max_head

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            if not self._counted_outside:
                if not accepted.admit():
                    log.warning("connection from %s closed unread: %d connections open (MAX_CONNECTIONS=%d)",
                                transport.get_extra_info("peername"), accepted.open, max_connections)
                    transport.close()
                    return
                self._admitted = True
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            if self._lingering:
                self._linger_on(len(data))
                return
            if self.conn.their_state is h11.IDLE:  # a request head is coming
                if self._head_timer is None:
                    self._arm_head_timer()  # the first byte of a kept-alive connection's next request
                self._head_bytes += len(data)
                if self._head_bytes > self._max_head and not self._head_checked:
                    head = self.conn.trailing_data[0] + data  # once per head, and only a long one
                    if head_too_large(head, self._max_head):
                        self._refuse(refused_head(head, self._max_head))
                        return
                    self._head_checked = True
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._cancel_head_timer()  # the head is in (or the connection failed)
                self._head_bytes, self._head_checked = 0, False
            if self._draining:
                self._last_request()

        def handle_events(self) -> None:
            super().handle_events()
            cycle = self.cycle
            if cycle is not None and not isinstance(cycle.transport, _LingerOnUnreadBody):
                cycle.transport = _LingerOnUnreadBody(self)  # uvicorn's cycle closes through it

        def close_after_answer(self) -> None:
            """The cycle's close after its answer: lingering while the client still sends its body."""
            if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
                self._linger()
            else:
                self.transport.close()

        def _answering(self) -> bool:
            """Whether a request's answer is still to be written (uvicorn's idle test, negated)."""
            return self.cycle is not None and not self.cycle.response_complete

        def shutdown(self) -> None:
            """uvicorn's graceful shutdown, per connection: one with a request in flight closes after
            its response (uvicorn's own); an idle one drains (the module's docstring says why)."""
            if self._answering():
                super().shutdown()
                return
            self._draining = True
            self.loop.call_later(DRAIN_SECONDS, self._drained)

        def _last_request(self) -> None:
            """A request that came while draining is answered with `connection: close`, then the
            connection closes (uvicorn closes it after a response whose cycle does not keep alive)."""
            if self._answering() and self.cycle.keep_alive:
                self.cycle.keep_alive = False
                self.cycle.default_headers = [*self.cycle.default_headers, CLOSE]

        def _drained(self) -> None:
            """The drain is over: still idle, with no request head coming, the connection closes as
            at its keep-alive timeout; one with a request closes after its response, a head still
            coming within its deadline."""
            if not self._answering() and self.conn.their_state is h11.IDLE and not self._head_bytes:
                self.timeout_keep_alive_handler()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            if self._linger_timer is not None:
                self._linger_timer.cancel()
            if self._admitted:
                self._admitted = False
                accepted.leave()
            if self.transport is not None:  # None: closed unread in connection_made
                super().connection_lost(exc)

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to what h11 refuses (a head too large, not HTTP): ours instead."""
            self._refuse(refused_head(self.conn.trailing_data[0], self._max_head))

        def _refuse(self, error: OcrError) -> None:
            """Answer a head the server will not read, in JSON, then close lingering (the module's
            docstring says why)."""
            log.info("request head from %s refused (%d): %s", self.client, error.status, error.message)
            self.transport.write(raw_answer(error))
            self._linger()

        def _linger(self) -> None:
            self._cancel_head_timer()
            self._lingering = True
            if self.transport.can_write_eof():
                self.transport.write_eof()  # the client reads the answer, then an end
            self.flow.resume_reading()
            self._linger_timer = self.loop.call_later(LINGER_SECONDS, self.transport.close)

        def _linger_on(self, size: int) -> None:
            self._lingered += size
            if self._lingered > LINGER_BYTES:
                self.transport.close()  # the client's end (eof_received's default) closes it sooner

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
            self._linger()  # the client is usually still sending its head

    BoundedH11Protocol.accepted = accepted  # type: ignore[attr-defined]
    return BoundedH11Protocol


class _LingerOnUnreadBody:
    """A request cycle's transport: the connection's own, except that closing it lingers while the
    client is still sending its body (the protocol's `close_after_answer`)."""

    def __init__(self, protocol: H11Protocol) -> None:
        self._protocol = protocol

    def __getattr__(self, name: str) -> object:
        return getattr(self._protocol.transport, name)

    def close(self) -> None:
        self._protocol.close_after_answer()  # type: ignore[attr-defined]
