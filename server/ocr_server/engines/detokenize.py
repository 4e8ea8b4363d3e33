"""Token ids arriving one by one -> text deltas (streaming).

The decoder re-decodes only a short window (the last two offsets), as vLLM's and TGI's incremental
detokenizers do, and holds text back while it ends in an incomplete UTF-8 sequence ("\\ufffd"), so
a multi-byte character is never split across deltas.
"""

from __future__ import annotations

from typing import Callable


class IncrementalDecoder:
    def __init__(self, decode: Callable[[list[int]], str], skip_ids: frozenset[int] = frozenset()) -> None:
        self.decode, self.skip_ids = decode, skip_ids
        self.ids: list[int] = []
        self.prefix_offset = 0
        self.read_offset = 0
        self.text = ""  # everything emitted so far

    def push(self, token_id: int) -> str:
        """The new text this token completes ("" while a character is incomplete)."""
        if token_id in self.skip_ids:  # BOS/EOS/padding: the response's raw text drops them too
            return ""
        self.ids.append(token_id)
        before = self.decode(self.ids[self.prefix_offset:self.read_offset])
        after = self.decode(self.ids[self.prefix_offset:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            delta = after[len(before):]
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            self.text += delta
            return delta
        return ""
