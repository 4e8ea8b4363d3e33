"""Poison documents: a document that kills the worker is quarantined, so its shard goes on.

A worker killed while it holds a document (out of memory, a crash in a decoder, a segfault)
cannot write that document's error: its pod fails, the Job starts another, and that one would
take the same document again, until the index runs out of retries and the rest of the shard is
never read. So, before a document is split, the worker writes a marker for it,
attempts/index-<n>.<h>.json: its content hash and how many attempts have begun. A finished
document has its result and its marker is never read again; a worker stopped gracefully
(SIGTERM, a fatal error) releases the markers of the documents it held. A marker found for a
document that has no result therefore means an earlier worker died holding it:

- the first time, the document is suspect but so are the others in flight with it: it is tried
  again alone (no other document in flight in this worker), so a second death is its own;
- a document that killed a worker while alone, or MAX_ATTEMPTS times in all, is poison: its
  errors entry says so, with what the marker knows of the last attempt, and it counts as failed.

The decision is pure (plan); Solo is the lock that lets a suspect run alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict, dataclass
from typing import Any, AsyncIterator

MAX_ATTEMPTS = 3  # attempts begun that never ended, in all, before a document is poison
POISON = "poison"


@dataclass(frozen=True)
class Marker:
    document: str
    sha256: str
    attempts: int  # attempts begun on this content
    alone: bool  # the last one ran with no other document in flight
    released: bool = False  # the last one ended with the worker stopped gracefully
    pod: str = ""
    started_at: float = 0.0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def parse(cls, data: bytes) -> Marker | None:
        """The marker written by to_json(), or None for a torn or foreign one (read as no marker)."""
        try:
            doc: Any = json.loads(data)
            return cls(str(doc["document"]), str(doc["sha256"]), int(doc["attempts"]), bool(doc["alone"]),
                       bool(doc.get("released", False)), str(doc.get("pod", "")), float(doc.get("started_at", 0)))
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Plan:
    action: str  # "run" (with the others), "alone", or POISON
    attempts: int  # the number of this attempt (1-based)
    reason: str = ""  # POISON: the errors entry's reason


def plan(marker: Marker | None, sha: str, concurrency: int) -> Plan:
    """What to do with a document that has no result, given its marker (None: no marker)."""
    if marker is None or marker.sha256 != sha:  # never begun, or a changed document
        return Plan("alone" if concurrency == 1 else "run", 1)
    if marker.released:  # the last attempt was stopped, not killed: not the document's fault
        return Plan("alone" if concurrency == 1 else "run", marker.attempts)
    if marker.alone or marker.attempts >= MAX_ATTEMPTS:
        how = "with no other document in flight" if marker.alone else "each time"
        pod = f" (last: pod {marker.pod})" if marker.pod else ""
        return Plan(POISON, marker.attempts, f"{POISON}: the worker was killed {marker.attempts} time(s) while it "
                                             f"held this document, {how}{pod}: out of memory or a crash "
                                             "while reading it; it is not read again")
    return Plan("alone", marker.attempts + 1)


class Solo:
    """Documents run side by side (shared) or one alone (exclusive): a suspect waits for the
    documents in flight to end, and none starts while it runs."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()
        self._shared = 0
        self._alone = False
        self._waiting = 0  # suspects waiting: new shared holders wait behind them

    @contextlib.asynccontextmanager
    async def hold(self, alone: bool) -> AsyncIterator[None]:
        async with self._changed:
            if alone:
                self._waiting += 1
                await self._changed.wait_for(lambda: not self._alone and self._shared == 0)
                self._waiting -= 1
                self._alone = True
            else:
                await self._changed.wait_for(lambda: not self._alone and self._waiting == 0)
                self._shared += 1
        try:
            yield
        finally:
            async with self._changed:
                if alone:
                    self._alone = False
                else:
                    self._shared -= 1
                self._changed.notify_all()
