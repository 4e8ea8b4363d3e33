"""A budget of request-body bytes for the whole server (MAX_INFLIGHT_BODY_BYTES).

A request's body is read whole into memory before the request is admitted to the engine's queue
(routes.read_body), and each body may be MAX_BODY_BYTES (base64 JSON: 4/3 of it). Bounded per
request and in the number of connections only, N connections could make the server hold
N x MAX_BODY_BYTES (1,024 x 20 MiB) at once. So each request reserves its body's bytes here before
reading them: its declared Content-Length at once, or each chunk of a body without one as it comes.
A reservation the budget cannot cover is a 503 with Retry-After and the body is not read; uvicorn
drops the rest of it as it arrives. A request's bytes go back to the budget when its answer is
done (a stream's last event included), since the body, or what is decoded from it, is held until
then.

One event loop touches the budget: no lock.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from ..runtime.errors import BodyBudgetFull

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]

LEASE_KEY = "body_lease"  # the request's BodyLease in the ASGI scope's state (request.state.body_lease)


class BodyBudget:
    """The bytes of request bodies held at once, out of `total`."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.held = 0

    def take(self, size: int) -> bool:
        """Reserve `size` bytes; False, reserving nothing, when they do not fit."""
        if self.held + size > self.total:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size


class BodyLease:
    """One request's share of the budget, given back whole when the request is done."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.held = 0

    def reserve(self, size: int, retry_after: int) -> None:
        """Reserve `size` more bytes for this request's body, or raise BodyBudgetFull (503)."""
        if size <= 0:
            return
        if not self.budget.take(size):
            raise BodyBudgetFull(
                f"the server holds {self.budget.held} bytes of request bodies and this one needs {size} more "
                f"(MAX_INFLIGHT_BODY_BYTES={self.budget.total}); retry later", retry_after=retry_after)
        self.held += size

    def release(self) -> None:
        self.budget.give(self.held)
        self.held = 0


class BodyBudgetMiddleware:
    """Gives each HTTP request a BodyLease (in its scope's state) and releases it when the app has
    answered: the ASGI call returns after the response's last byte, streamed or not."""

    def __init__(self, app: ASGIApp, budget: BodyBudget) -> None:
        self.app = app
        self.budget = budget

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[dict]],
                       send: Callable[[dict], Awaitable[None]]) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        lease = BodyLease(self.budget)
        scope.setdefault("state", {})[LEASE_KEY] = lease
        try:
            await self.app(scope, receive, send)
        finally:
            lease.release()
