"""The windowed no-repeat n-gram guard: the reference for generate(), and the same rule as tensor ops
over slots (no host sync, capturable in a CUDA graph) for the slots decoder.

`TensorNGramGuard` bans exactly what `WindowedNoRepeatNGram` bans (the official DeepSeek-OCR 2 rule): with
t tokens generated, a token that would complete an n-gram already seen among the last `window`
generated tokens, unless whitelisted; each slot has its own (n, window, whitelist).

The reference compares every n-gram in the window with the current (n-1)-token prefix, O(window x
n) per row and per step, on the host. Here each slot keeps, for every shift d (1..capacity), the
length of the common suffix of the generated sequence and of itself shifted by d; one new token x
updates it in O(capacity): match[d] = match[d] + 1 if out[t-d] == x else 0. With t tokens generated,
out[t-d] is banned when match[d] >= n-1 and d <= min(t, window) - n + 1 (the n-gram starts inside
the window). The last `capacity` tokens are kept in a ring; capacity bounds the shifts, so it must
be at least the most tokens a row can generate (a window never reaches further back than that).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch


class WindowedNoRepeatNGram:
    """Ban a token that would repeat an n-gram seen in the last `window` generated tokens.

    Same rule as the official NoRepeatNGramLogitsProcessor (DeepSeek-OCR-2 vLLM scripts). `rows`
    gives each row its own (ngram, window, whitelist), as vLLM's per-request processor does.
    """

    def __init__(self, prompt_len: int, ngram: int, window: int, whitelist: set[int],
                 rows: list[tuple[int, int, set[int]]] | None = None) -> None:
        self.prompt_len, self.ngram, self.window, self.whitelist = prompt_len, ngram, window, whitelist
        self.rows = rows

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.rows is None and self.ngram <= 0:
            return scores
        generated = input_ids[:, self.prompt_len:].tolist()
        for row, out in enumerate(generated):
            n, window, whitelist = self.rows[row] if self.rows is not None else (self.ngram, self.window, self.whitelist)
            if n <= 0 or len(out) < n:
                continue
            prefix = out[-(n - 1):] if n > 1 else []
            start = max(0, len(out) - window)
            banned = {out[i + n - 1] for i in range(start, len(out) - n + 1) if out[i:i + n - 1] == prefix}
            banned -= whitelist
            if banned:
                scores[row, list(banned)] = -math.inf
        return scores


class TensorNGramGuard:
    """Per-slot guard state on one device: the ring of generated tokens, suffix matches, settings."""

    def __init__(self, slots: int, capacity: int, vocab: int, device: torch.device | str) -> None:
        if capacity < 1:
            raise ValueError(f"n-gram guard capacity must be >= 1, got {capacity}")
        self.slots, self.capacity, self.vocab = slots, capacity, vocab
        self.ring = torch.zeros(slots, capacity, dtype=torch.long, device=device)
        self.match = torch.zeros(slots, capacity, dtype=torch.int32, device=device)
        self.count = torch.zeros(slots, dtype=torch.long, device=device)  # tokens generated
        self.n = torch.zeros(slots, dtype=torch.long, device=device)  # 0: guard off for the slot
        self.window = torch.zeros(slots, dtype=torch.long, device=device)
        self.whitelist = torch.zeros(slots, vocab, dtype=torch.bool, device=device)
        self.shifts = torch.arange(1, capacity + 1, device=device)

    def reset(self, slot: int, n: int, window: int, whitelist: Iterable[int]) -> None:
        """A new row in `slot`: nothing generated yet, its own settings. Device writes only."""
        self.ring[slot].zero_()
        self.match[slot].zero_()
        self.count[slot] = 0
        self.n[slot] = max(int(n), 0)
        self.window[slot] = max(int(window), 0)
        self.whitelist[slot].zero_()
        ids = sorted({int(i) for i in whitelist if 0 <= int(i) < self.vocab})
        if ids:
            self.whitelist[slot, torch.tensor(ids, dtype=torch.long).to(self.whitelist.device)] = True

    def bans(self, rows: int) -> torch.Tensor:
        """[rows, vocab] bool: the tokens each of slots 0..rows-1 may not generate next."""
        t = self.count[:rows, None]
        n = self.n[:rows, None]
        reach = torch.minimum(t, self.window[:rows, None]) - n + 1
        valid = (n > 0) & (self.shifts[None, :] <= reach) & (self.match[:rows] >= n - 1)
        positions = torch.remainder(t - self.shifts[None, :], self.capacity)
        candidates = self.ring[:rows].gather(1, positions)
        target = torch.where(valid, candidates, torch.full_like(candidates, self.vocab))
        banned = torch.zeros(rows, self.vocab + 1, dtype=torch.bool, device=self.ring.device)
        banned.scatter_(1, target, True)
        return banned[:, : self.vocab] & ~self.whitelist[:rows]

    def append(self, tokens: torch.Tensor, live: torch.Tensor, start: int = 0) -> None:
        """Record one generated token for each slot start..start+len(tokens)-1; slots where `live` is
        False keep their state."""
        rows = slice(start, start + tokens.shape[0])
        t = self.count[rows, None]
        positions = torch.remainder(t - self.shifts[None, :], self.capacity)
        previous = self.ring[rows].gather(1, positions)
        same = (previous == tokens[:, None]) & (self.shifts[None, :] <= t)
        grown = torch.where(same, self.match[rows] + 1, torch.zeros_like(self.match[rows]))
        self.match[rows] = torch.where(live[:, None], grown, self.match[rows])
        at = torch.remainder(t, self.capacity)
        kept = self.ring[rows].gather(1, at)
        self.ring[rows].scatter_(1, at, torch.where(live[:, None], tokens[:, None], kept))
        self.count[rows] += live.long()
