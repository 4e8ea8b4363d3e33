"""Calls to endpoints a tenant chooses (a batch callback's DNS name, a pod's answers): in a pool
of their own, each with a deadline, and read up to a limit. (A batch's storage is not one: the
operator never connects to it; its workers do.)

A tenant's endpoint may answer slowly, never, or with gigabytes. Blocking calls for it
(getaddrinfo) do not run in the event loop's default executor, which the operator's other
work shares, but in TENANT_CALLS: a few threads of their own, at most one call per tenant key at
a time (a second call of a busy tenant is refused at once, not queued behind the first), and a
deadline on the wait. A call that outlives its deadline keeps its thread until its own socket
timeouts end it, so the callers give those short timeouts; meanwhile the other threads serve the
other tenants. `read_limited` reads an aiohttp body up to a limit, for the same reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Callable, Hashable, TypeVar

T = TypeVar("T")

THREADS = 4
DEFAULT_TIMEOUT = 20.0


class TooLarge(Exception):
    """An answer longer than the reader's limit (the rest is not read)."""


class Busy(Exception):
    """The tenant already has a call in flight (or the pool is full): asked again later."""


class TenantCalls:
    """A bounded thread pool for blocking calls to tenant endpoints; at most one call per `tenant`
    in flight, and a caller waits at most `timeout` seconds for its result."""

    def __init__(self, threads: int = THREADS) -> None:
        self.threads = threads
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._busy: set[Hashable] = set()

    def _executor(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix="tenant-call")
            return self._pool

    def in_flight(self) -> int:
        with self._lock:
            return len(self._busy)

    async def run(self, fn: Callable[[], T], *, timeout: float = DEFAULT_TIMEOUT, tenant: Hashable | None = None,
                  what: str = "the call") -> T:
        """fn() in the pool; asyncio.TimeoutError after `timeout` seconds (naming `what`), Busy when
        `tenant` has a call in flight or every thread is taken by a call past its deadline."""
        token: Hashable = tenant if tenant is not None else object()
        with self._lock:
            if token in self._busy:
                raise Busy(f"{what}: an earlier call for the same tenant has not ended yet")
            if len(self._busy) >= self.threads:
                raise Busy(f"{what}: every thread for tenant endpoints is taken; asked again later")
            self._busy.add(token)

        def call() -> T:
            try:
                return fn()
            finally:
                with self._lock:
                    self._busy.discard(token)

        try:
            future = self._executor().submit(call)
        except BaseException:
            with self._lock:
                self._busy.discard(token)
            raise
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except asyncio.TimeoutError:
            raise asyncio.TimeoutError(f"{what}: no answer within {timeout:g} s") from None


TENANT_CALLS = TenantCalls()


async def read_limited(content: asyncio.StreamReader, limit: int) -> bytes:
    """A body (aiohttp's response.content) up to `limit` bytes; TooLarge as soon as it is longer.
    (StreamReader.read(n) returns what has arrived, so one read is not the whole body.)"""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await content.read(min(65536, limit + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"an answer longer than {limit} bytes")
