"""Which documents a Job index owns: a pure function of the key, the index and the shard count.

A document belongs to index sha256(key) mod N, not to a position in the listing: a document
added to or removed from the input while the Job runs (or between a worker's restarts) moves no
other document to another index, so two indices never both take one document, and a restarted
index finds the same documents it had, with its finished ones already written.
"""

from __future__ import annotations

import hashlib
from typing import Sequence


def shard_of(key: str, shards: int) -> int:
    """The index (0..shards-1) that owns `key`."""
    if shards < 1:
        raise ValueError(f"shards must be >= 1, not {shards}")
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % shards


def take_shard(items: Sequence[tuple[str, int]], index: int, shards: int) -> list[tuple[str, int]]:
    """The (key, size) items index `index` of `shards` owns, in key order (the listing's)."""
    if not 0 <= index < shards:
        raise ValueError(f"index {index} is not in 0..{shards - 1}")
    return sorted(item for item in items if shard_of(item[0], shards) == index)
