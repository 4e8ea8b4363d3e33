"""Bounded LRU of finished responses, keyed by a hash of the document bytes and the options."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any


def cache_key(data: bytes, options: dict[str, Any], model_revision: str) -> str:
    h = hashlib.sha256()
    h.update(data)
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    h.update(model_revision.encode())
    return h.hexdigest()


class ResultCache:
    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: str, value: dict) -> None:
        if self.max_entries <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
