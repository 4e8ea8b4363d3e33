"""A bound on the bytes of documents a worker holds at once, whatever its concurrency.

A worker reads up to `concurrencyPerWorker` documents at a time to keep that many pages in
flight; with large documents that alone could take concurrency x maxDocumentBytes of memory.
The budget lets documents in while their sizes (from the listing) fit, so many small images run
side by side while large PDFs wait their turn; a document larger than the whole budget is let in
alone, so every document gets its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator


class ByteBudget:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._changed = asyncio.Condition()

    def fits(self, size: int) -> bool:
        return self.held == 0 or self.held + size <= self.limit

    @contextlib.asynccontextmanager
    async def hold(self, size: int) -> AsyncIterator[None]:
        """Wait until `size` more bytes fit, hold them for the block."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.fits(size))
            self.held += size
        try:
            yield
        finally:
            async with self._changed:
                self.held -= size
                self._changed.notify_all()
