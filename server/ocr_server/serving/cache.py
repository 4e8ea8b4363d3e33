"""Bounded LRU of finished responses, keyed by a hash of the document bytes, the options and the
tenant (a hash of the API key), and bounded in entries and in bytes.

The tenant is part of the key so that `cached: true` never tells one API key that another sent
the same document; the key itself is never stored, only its sha256.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Generic, Mapping, TypeVar

from pydantic import BaseModel

V = TypeVar("V", bound="BaseModel | Mapping[str, Any]")


def tenant_id(api_key: str | None) -> str:
    """Who the cache entry belongs to: '' without API keys, else the sha256 of the key."""
    if not api_key:
        return ""
    return hashlib.sha256(b"ocr-cache-tenant\0" + api_key.encode()).hexdigest()


def cache_key(data: bytes, options: dict[str, Any], model_revision: str, tenant: str = "") -> str:
    h = hashlib.sha256()
    h.update(data)
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    h.update(model_revision.encode())
    h.update(b"\0" + tenant.encode())
    return h.hexdigest()


def entry_size(value: BaseModel | Mapping[str, Any]) -> int:
    """An entry's size, as the bytes of its JSON: what the response costs to hold, near enough."""
    if isinstance(value, BaseModel):
        return len(value.model_dump_json().encode())
    return len(json.dumps(value, default=str).encode())


class ResultCache(Generic[V]):
    """Finished responses (the service's OcrResponse), least recently used out first."""

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict[str, tuple[V, int]] = OrderedDict()
        self.bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> V | None:
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            self._items.move_to_end(key)
            return entry[0]

    def put(self, key: str, value: V) -> None:
        if self.max_entries <= 0 or self.max_bytes <= 0:
            return
        size = entry_size(value)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (value, size)
            self.bytes += size
            while len(self._items) > self.max_entries or self.bytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.bytes -= dropped

    def __len__(self) -> int:
        return len(self._items)
