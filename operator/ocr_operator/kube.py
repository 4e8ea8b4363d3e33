"""A small async Kubernetes REST client on dicts (auth and TLS from lightkube's kubeconfig loader).

One client per operator process; every request carries our User-Agent so the API server's audit
log attributes it. Only apply.py and status.py call the writing methods.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

import httpx2 as httpx
from lightkube.config.client_adapter import ConnectionParams
from lightkube.config.kubeconfig import KubeConfig

from . import __version__, children, naming

log = logging.getLogger(__name__)

# Connections to the API server (requests beyond wait for one); OCR_OPERATOR_API_CONNECTIONS.
MAX_CONNECTIONS = int(os.environ.get("OCR_OPERATOR_API_CONNECTIONS", "16"))


@dataclass(frozen=True)
class ResourceType:
    api_version: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


TYPES: dict[str, ResourceType] = {
    "OcrService": ResourceType("ocr.causalflow.dev/v1alpha1", "ocrservices"),
    "Event": ResourceType("v1", "events"),
    "ReplicaSet": ResourceType("apps/v1", "replicasets"),
    **{k.kind: ResourceType(k.api_version, k.plural) for k in children.KINDS.values()},
}


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


class Kube:
    def __init__(self, config: KubeConfig | None = None, *, timeout: float = 15.0) -> None:
        cfg = (config or KubeConfig.from_env()).get()
        # A small pool: before each request httpcore polls every pooled connection's socket to see
        # whether it expired, a cost per request that grows with the pool (httpx's default keeps
        # up to 100); MAX_CONNECTIONS requests in flight keep a local API server busy.
        params = ConnectionParams(timeout=httpx.Timeout(timeout)).httpx_params(cfg)
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS)
        self._http = httpx.AsyncClient(**params, limits=limits)
        self._http.headers["User-Agent"] = f"{naming.USER_AGENT}/{__version__}"
        self.requests = 0
        self.writes = 0
        self.by_request: collections.Counter[str] = collections.Counter()  # "GET pods": count

    async def close(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                       body: Any = None, content_type: str = "application/json") -> Any:
        self.requests += 1
        if method != "GET":
            self.writes += 1
        self.by_request[f"{method} {request_resource(path)}"] += 1
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        try:
            resp = await self._http.request(method, path, params={k: v for k, v in (params or {}).items() if v is not None},
                                            content=data, headers=headers)
        except httpx.TransportError as exc:
            raise ApiError(503, "Unavailable", f"{method} {path}: {exc!r}") from exc
        if resp.status_code >= 400:
            try:
                payload = resp.json()
            except ValueError:
                payload = {}
            raise ApiError(resp.status_code, payload.get("reason") or resp.reason_phrase,
                           payload.get("message") or resp.text[:500])
        return resp.json() if resp.content else None

    async def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._request("GET", TYPES[kind].path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        out = await self._request("GET", TYPES[kind].path(namespace), params={"labelSelector": label_selector})
        items = out.get("items") or []
        api_version, kind_name = TYPES[kind].api_version, kind
        for item in items:  # list items carry no apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind_name)
        return items

    async def apply(self, body: Mapping[str, Any], *, manager: str = naming.FIELD_MANAGER, force: bool = True,
                    subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply of `body` (a full or partial manifest) with one field manager."""
        kind = body["kind"]
        md = body["metadata"]
        return await self._request(
            "PATCH", TYPES[kind].path(md.get("namespace"), md["name"], subresource),
            params={"fieldManager": manager, "force": "true" if force else None},
            body=body, content_type="application/apply-patch+yaml",
        )

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: Mapping[str, Any], *,
                          subresource: str | None = None) -> dict[str, Any]:
        return await self._request("PATCH", TYPES[kind].path(namespace, name, subresource),
                                   params={"fieldManager": naming.FIELD_MANAGER},
                                   body=patch, content_type="application/merge-patch+json")

    async def create(self, kind: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._request("POST", TYPES[kind].path(namespace),
                                   params={"fieldManager": naming.FIELD_MANAGER}, body=body)

    async def delete(self, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self._request("DELETE", TYPES[kind].path(namespace, name), body=body)
        except ApiError as exc:
            if exc.status != 404:
                raise

    async def has_resource(self, kind: str) -> bool:
        """Whether the API serves `kind` (e.g. ServiceMonitor only with prometheus-operator's CRDs)."""
        t = TYPES[kind]
        try:
            out = await self._request("GET", f"/apis/{t.api_version}" if "/" in t.api_version else f"/api/{t.api_version}")
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
