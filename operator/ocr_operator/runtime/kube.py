"""A small async Kubernetes REST client on dicts (auth and TLS from lightkube's kubeconfig loader).

One client per operator process; every request carries the operator's User-Agent so the API
server's audit log attributes it. The kinds it knows come from the controllers' tables (kinds.py):
the client itself knows none but the runtime's own (Events, the Lease).

The transport is aiohttp (kopf's own HTTP client, so no new dependency): under a burst of
reconciles it costs about a third of httpx's CPU per request, and the operator's CPU is taken
from the API server it shares a node with. lightkube only reads the kubeconfig: the server, an
SSL context (cluster CA, client certificate) and an ``httpx.Auth`` for the user (token, token
file re-read on 401 as the kubelet rotates it, exec plugin, basic). That auth flow is driven
here only to get the Authorization header, once, and again after a 401.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from typing import Any, Iterable, Mapping

import aiohttp
import httpx2 as httpx
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig

from .identity import Identity
from .kinds import RUNTIME_KINDS, ApiKind

log = logging.getLogger(__name__)

# Connections to the API server (requests beyond wait for one); OCR_OPERATOR_API_CONNECTIONS.
MAX_CONNECTIONS = int(os.environ.get("OCR_OPERATOR_API_CONNECTIONS", "16"))
LIST_CHUNK = 500  # objects per page of a LIST


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def retryable(self) -> bool:
        """Conflicts, throttling and server-side trouble are worth a retry; 4xx otherwise are not."""
        return self.status in (409, 429) or self.status >= 500


def request_resource(path: str) -> str:
    """The resource (and subresource) a request path names: 'pods', 'ocrservices/status'; for
    counting requests by kind (the operator's probe and its benchmark)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # /api/v1/... or /apis/GROUP/VERSION/...
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:] or ["namespaces"]
    if not parts:
        return "discovery"
    return parts[0] if len(parts) < 3 else f"{parts[0]}/{parts[2]}"


class _Authorizer:
    """The Authorization header from lightkube's ``httpx.Auth`` for the kubeconfig's user."""

    def __init__(self, auth: httpx.Auth | None, base_url: str) -> None:
        self._auth, self._url = auth, base_url
        self.header: str | None = None
        self._lock = asyncio.Lock()

    async def _flow(self, unauthorized: bool) -> str | None:
        flow = self._auth.async_auth_flow(httpx.Request("GET", self._url))
        try:
            request = await flow.__anext__()
            if unauthorized:  # tell the flow its header was refused: token files are re-read, exec re-run
                request = await flow.asend(httpx.Response(401, request=request))
        except StopAsyncIteration:
            return None  # the flow has nothing newer (a static token)
        finally:
            await flow.aclose()
        return request.headers.get("Authorization")

    async def get(self) -> str | None:
        if self._auth is not None and self.header is None:
            async with self._lock:
                if self.header is None:
                    self.header = await self._flow(unauthorized=False)
        return self.header

    async def refresh(self, refused: str | None) -> bool:
        """After a 401 with header `refused`: whether a different header is now available."""
        if self._auth is None:
            return False
        async with self._lock:
            if self.header != refused:  # another request refreshed it meanwhile
                return self.header is not None
            header = await self._flow(unauthorized=True)
            if header is None or header == refused:
                return False
            self.header = header
            return True


class Kube:
    """`identity`: the field manager of every write and the User-Agent; `kinds`: what it may be
    asked for, beside the runtime's own; `config`: the kubeconfig (default: the environment's)."""

    def __init__(self, identity: Identity, kinds: Iterable[ApiKind] = (), config: KubeConfig | None = None, *,
                 timeout: float = 15.0) -> None:
        self.identity = identity
        self.types: dict[str, ApiKind] = {k.kind: k for k in (*RUNTIME_KINDS, *kinds)}
        cfg = (config or KubeConfig.from_env()).get()
        params = ConnectionParams().httpx_params(cfg)
        self._base = str(params["base_url"]).rstrip("/")
        self._ssl = params["verify"] if self._base.startswith("https:") else None
        self._auth = _Authorizer(params.get("auth"), self._base)
        # Per phase, as httpx had it: a pooled connection (or a new one) within `timeout`, and no
        # read waits longer than that; a large list may take longer in all.
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None  # made on the loop that uses it
        self._headers = {"User-Agent": identity.user_agent, "Accept": "application/json"}
        self.requests = 0
        self.writes = 0
        self.by_request: collections.Counter[str] = collections.Counter()  # "GET pods": count

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # MAX_CONNECTIONS requests in flight keep a local API server busy; beyond, they wait.
            connector = aiohttp.TCPConnector(limit=MAX_CONNECTIONS, ssl=self._ssl if self._ssl is not None else True)
            # trust_env: HTTPS_PROXY / NO_PROXY apply, as they do for client-go and kubectl.
            self._session = aiohttp.ClientSession(connector=connector, timeout=self._timeout,
                                                  headers=self._headers, trust_env=True)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       body: Any = None, content_type: str = "application/json", raw: bool = False) -> Any:
        self.requests += 1
        if method != "GET":
            self.writes += 1
        self.by_request[f"{method} {request_resource(path)}"] += 1
        headers = {}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        query = {k: v for k, v in (params or {}).items() if v is not None}
        for attempt in range(2):
            authorization = await self._auth.get()
            if authorization:
                headers["Authorization"] = authorization
            try:
                async with self._client().request(method, self._base + path, params=query, data=data,
                                                  headers=headers) as resp:
                    status, content = resp.status, await resp.read()
                    phrase = resp.reason or ""
            except aiohttp.ServerDisconnectedError as exc:
                # Mostly a kept-alive connection the server closed just as it was reused: sent
                # once more on a new one, except a create (if it did arrive, it would land twice;
                # applies and patches are idempotent).
                if attempt == 0 and method != "POST":
                    continue
                raise ApiError(503, "Unavailable", f"{method} {path}: {exc!r}") from exc
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                raise ApiError(503, "Unavailable", f"{method} {path}: {exc!r}") from exc
            if status == 401 and attempt == 0 and await self._auth.refresh(authorization):
                continue
            break
        if status >= 400:
            try:
                payload = json.loads(content)
            except ValueError:
                payload = {}
            payload = payload if isinstance(payload, dict) else {}
            raise ApiError(status, payload.get("reason") or phrase,
                           payload.get("message") or content[:500].decode(errors="replace"))
        if raw:
            return content
        return json.loads(content) if content else None

    async def read_log(self, namespace: str, pod: str, *, tail_lines: int, limit_bytes: int,
                       container: str | None = None) -> str:
        """The last `tail_lines` lines of a pod's container's log (its only one, or `container`,
        an init container too), at most `limit_bytes`."""
        params: dict[str, Any] = {"tailLines": tail_lines, "limitBytes": limit_bytes}
        if container is not None:
            params["container"] = container
        content = await self._request("GET", self.types["Pod"].path(namespace, pod, "log"), params=params, raw=True)
        return content.decode(errors="replace")

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._request("GET", self.types[kind].path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str | None, label_selector: str | None = None, *,
                   field_selector: str | None = None) -> list[dict[str, Any]]:
        """Every object of `kind` (in `namespace`, None: all; the selectors filter on the server),
        LIST_CHUNK at a time: an unfiltered list of a cluster's ConfigMaps is never one response held whole."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        while True:
            out = await self._request("GET", self.types[kind].path(namespace), params={
                "labelSelector": label_selector, "fieldSelector": field_selector, "limit": LIST_CHUNK,
                "continue": token})
            items += out.get("items") or []
            token = (out.get("metadata") or {}).get("continue") or None
            if token is None:
                break
        api_version = self.types[kind].api_version
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def apply(self, body: Mapping[str, Any], *, manager: str | None = None, force: bool = True,
                    subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply of `body` (a full or partial manifest) with one field manager."""
        kind = body["kind"]
        md = body["metadata"]
        return await self._request(
            "PATCH", self.types[kind].path(md.get("namespace"), md["name"], subresource),
            params={"fieldManager": manager or self.identity.field_manager, "force": "true" if force else None},
            body=body, content_type="application/apply-patch+yaml",
        )

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], *,
                          subresource: str | None = None) -> dict[str, Any]:
        return await self._request("PATCH", self.types[kind].path(namespace, name, subresource),
                                   params={"fieldManager": self.identity.field_manager},
                                   body=patch, content_type="application/merge-patch+json")

    async def json_patch(self, kind: str, namespace: str, name: str, ops: list[Mapping[str, Any]]) -> dict[str, Any]:
        """A JSON patch (RFC 6902): its `test` operations make the whole patch conditional."""
        return await self._request("PATCH", self.types[kind].path(namespace, name),
                                   params={"fieldManager": self.identity.field_manager},
                                   body=ops, content_type="application/json-patch+json")

    async def strategic_patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], *,
                              subresource: str | None = None) -> dict[str, Any]:
        """A strategic merge patch: lists merge by their key (a pod's status conditions by type, so
        the kubelet's own conditions stay as they are)."""
        return await self._request("PATCH", self.types[kind].path(namespace, name, subresource),
                                   params={"fieldManager": self.identity.field_manager},
                                   body=patch, content_type="application/strategic-merge-patch+json")

    async def replace(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT `body` whole. With metadata.resourceVersion set, the API server refuses it with 409
        Conflict if the object changed since it was read (leader election's optimistic lock)."""
        md = body["metadata"]
        return await self._request("PUT", self.types[body["kind"]].path(md.get("namespace"), md["name"]),
                                   params={"fieldManager": self.identity.field_manager}, body=body)

    async def create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("POST", self.types[kind].path(namespace),
                                   params={"fieldManager": self.identity.field_manager}, body=body)

    async def delete(self, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", self.types[kind].path(namespace, name), body=body)
        except ApiError as exc:
            if exc.status != 404:
                raise

    async def has_resource(self, kind: str) -> bool:
        """Whether the API serves `kind` (e.g. ServiceMonitor only with prometheus-operator's CRDs)."""
        t = self.types[kind]
        try:
            out = await self._request("GET", f"/apis/{t.api_version}" if t.group else f"/api/{t.api_version}")
        except ApiError as exc:
            if exc.status in (404, 503):
                return False
            raise
        return any(r.get("name") == t.plural for r in out.get("resources") or ())


async def retrying(coro_factory, *, attempts: int = 3, delay: float = 0.5):
    """Run `coro_factory()` again on a retryable ApiError (409, 429, 5xx), with a short backoff."""
    for attempt in range(attempts):
        try:
            return await coro_factory()
        except ApiError as exc:
            if not exc.retryable or attempt == attempts - 1:
                raise
            await asyncio.sleep(delay * (2 ** attempt))
