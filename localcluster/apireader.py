"""Reads of cluster objects over one kept-alive HTTPS connection: the tests' polling path.

A test that waits for a condition reads the same object every half second. Through kubectl each
read is a process of its own (about 56 ms of CPU: the Go runtime, the client's start-up, a TLS
handshake), and a `make test` run made thousands of them. The reader answers the same question
from the API server's REST paths (what `kubectl get -o json` fetches) on a connection per thread,
resolving the names kubectl accepts (plural, singular, short names, `plural.group`) by discovery,
as kubectl's REST mapper does. It reads only: what a test changes still goes through kubectl, the
client users have.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import urllib.parse
from dataclasses import dataclass


class NotFound(LookupError):
    """The object does not exist."""


class UnknownResource(LookupError):
    """No served resource has that name (kubectl: "the server doesn't have a resource type")."""


@dataclass(frozen=True)
class Resource:
    prefix: str  # "/api/v1" or "/apis/<group>/<version>"
    plural: str
    namespaced: bool


class ApiReader:
    def __init__(self, server: str, token: str, ca_file: str, timeout: float = 10) -> None:
        url = urllib.parse.urlsplit(server)
        self._host, self._port = url.hostname, url.port or 443
        self._headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self._context = ssl.create_default_context(cafile=ca_file)
        self._timeout = timeout
        self._local = threading.local()
        self._names: dict[str, Resource] = {}
        self._lock = threading.Lock()

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """The object, or None when it does not exist (`kubectl get KIND NAME -o json`); a kind the
        server does not serve raises UnknownResource, as kubectl fails."""
        try:
            return self._get(self._path(kind, namespace) + "/" + urllib.parse.quote(name, safe=""))
        except NotFound:
            return None

    def list(self, kind: str, namespace: str | None = None, selector: str | None = None,
             fields: str | None = None) -> list[dict]:
        """The objects' items (`kubectl get KIND [-l SELECTOR] [--field-selector FIELDS] -o json`),
        in the API server's order."""
        params = {k: v for k, v in (("labelSelector", selector), ("fieldSelector", fields)) if v}
        query = "?" + urllib.parse.urlencode(params) if params else ""
        return self._get(self._path(kind, namespace) + query).get("items") or []

    # -- internals ----------------------------------------------------------------------------
    def _path(self, kind: str, namespace: str | None) -> str:
        resource = self._resource(kind)
        if resource.namespaced and namespace:
            return f"{resource.prefix}/namespaces/{namespace}/{resource.plural}"
        return f"{resource.prefix}/{resource.plural}"

    def _resource(self, kind: str) -> Resource:
        key = kind.lower()
        with self._lock:
            if key not in self._names:
                self._names = self._discover()  # a CRD created since the last look is found now
            if key not in self._names:
                raise UnknownResource(f"the server doesn't have a resource type {kind!r}")
            return self._names[key]

    def _discover(self) -> dict[str, Resource]:
        """Every name kubectl accepts for a served resource. A group's preferred version is listed
        first, so its resources win a name that another version also serves."""
        names: dict[str, Resource] = {}
        prefixes = ["/api/v1"]
        for group in self._get("/apis").get("groups") or []:
            preferred = group["preferredVersion"]["groupVersion"]
            prefixes += [f"/apis/{preferred}"] + [f"/apis/{v['groupVersion']}" for v in group["versions"]
                                                  if v["groupVersion"] != preferred]
        for prefix in prefixes:
            group = prefix.split("/")[2] if prefix.startswith("/apis/") else ""
            for r in self._get(prefix).get("resources") or []:
                if "/" in r["name"]:
                    continue  # a subresource
                resource = Resource(prefix, r["name"], bool(r.get("namespaced")))
                aliases = [r["name"], r.get("singularName") or r["kind"].lower(), *(r.get("shortNames") or [])]
                aliases += [f"{r['name']}.{group}"] if group else []
                for alias in aliases:
                    names.setdefault(alias.lower(), resource)
        return names

    def _get(self, path: str) -> dict:
        for attempt in (1, 2):  # a kept-alive connection the server closed is opened again once
            connection = getattr(self._local, "connection", None)
            if connection is None:
                connection = http.client.HTTPSConnection(self._host, self._port, context=self._context,
                                                         timeout=self._timeout)
                self._local.connection = connection
            try:
                connection.request("GET", path, headers=self._headers)
                response = connection.getresponse()
                body = response.read()
            except (http.client.HTTPException, OSError):
                connection.close()
                self._local.connection = None
                if attempt == 2:
                    raise
                continue
            if response.status == 404:
                raise NotFound(path)
            if response.status != 200:
                raise RuntimeError(f"GET {path}: {response.status} {body[:300].decode(errors='replace')}")
            return json.loads(body)
        raise AssertionError("unreachable")
