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
    """Per-slot guard state on one device: the ring of generated tokens, suffix matches, settings.

    The bans are applied where they land: `apply` gathers each row's `capacity` candidate tokens and
    sets the banned ones to -inf in the scores (a scatter of `capacity` values per row), instead of
    building a [rows, vocab] mask; the work per step is O(rows x capacity), not O(rows x vocab)."""

    def __init__(self, slots: int, capacity: int, vocab: int, device: torch.device | str) -> None:
        if capacity < 1:
            raise ValueError(f"n-gram guard capacity must be >= 1, got {capacity}")
        self.slots, self.capacity, self.vocab = slots, capacity, vocab
        self.ring = torch.zeros(slots, capacity, dtype=torch.long, device=device)
        self.match = torch.zeros(slots, capacity, dtype=torch.int32, device=device)
        self.count = torch.zeros(slots, dtype=torch.long, device=device)  # tokens generated
        self.n = torch.zeros(slots, dtype=torch.long, device=device)  # 0: guard off for the slot
        self.window = torch.zeros(slots, dtype=torch.long, device=device)
        self.whitelist = torch.zeros(slots, vocab + 1, dtype=torch.bool, device=device)  # column vocab: padding
        self.shifts = torch.arange(1, capacity + 1, device=device)

    def reset(self, slot: int, n: int, window: int, whitelist: Iterable[int]) -> None:
        """A new row in `slot`: nothing generated yet, its own settings (tests; the decoder resets
        the rows of a prefill at once with `reset_rows`)."""
        ids = sorted({int(i) for i in whitelist if 0 <= int(i) < self.vocab}) or [self.vocab]
        self.reset_rows(torch.tensor([slot], device=self.ring.device),
                        torch.tensor([max(int(n), 0)], device=self.ring.device),
                        torch.tensor([max(int(window), 0)], device=self.ring.device),
                        torch.tensor([ids], device=self.ring.device))

    def reset_rows(self, slots: torch.Tensor, n: torch.Tensor, window: torch.Tensor, white: torch.Tensor) -> None:
        """New rows in `slots` [k] with their settings n, window [k] and whitelisted ids [k, m] (padded
        with `vocab`); device ops only."""
        k = slots.shape[0]
        self.ring.index_fill_(0, slots, 0)
        self.match.index_fill_(0, slots, 0)
        self.count.index_fill_(0, slots, 0)
        self.n.index_copy_(0, slots, n)
        self.window.index_copy_(0, slots, window)
        rows = torch.zeros(k, self.vocab + 1, dtype=torch.bool, device=self.ring.device)
        rows.scatter_(1, white.clamp(0, self.vocab), True)
        rows[:, self.vocab] = False
        self.whitelist.index_copy_(0, slots, rows)

    def _candidates(self, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The token each shift would complete [rows, capacity], and whether it is banned."""
        t = self.count[:rows, None]
        n = self.n[:rows, None]
        reach = torch.minimum(t, self.window[:rows, None]) - n + 1
        valid = (n > 0) & (self.shifts[None, :] <= reach) & (self.match[:rows] >= n - 1)
        positions = torch.remainder(t - self.shifts[None, :], self.capacity)
        candidates = self.ring[:rows].gather(1, positions)
        white = self.whitelist[:rows].gather(1, candidates)
        return candidates, valid & ~white

    def apply(self, scores: torch.Tensor) -> torch.Tensor:
        """Set the tokens each of slots 0..rows-1 may not generate next to -inf in scores [rows, vocab], in place."""
        candidates, banned = self._candidates(scores.shape[0])
        bound = torch.where(banned, -math.inf, math.inf).to(scores.dtype)
        return scores.scatter_reduce_(1, candidates, bound, reduce="amin")  # min(x, +inf) = x: untouched

    def bans(self, rows: int) -> torch.Tensor:
        """[rows, vocab] bool: the tokens each of slots 0..rows-1 may not generate next (tests, tools)."""
        return torch.isneginf(self.apply(torch.zeros(rows, self.vocab, device=self.ring.device)))

    def append(self, tokens: torch.Tensor, live: torch.Tensor, start: int = 0) -> None:
        """Record one generated token for each slot start..start+len(tokens)-1; slots where `live` is
        False keep their state."""
        rows = slice(start, start + tokens.shape[0])
        ring, match, count = self.ring[rows], self.match[rows], self.count[rows]
        match_new, at, kept = self._appended(ring, match, count, tokens, live)
        match.copy_(match_new)
        ring.scatter_(1, at, kept)
        count.add_(live.long())

    def append_rows(self, slots: torch.Tensor, tokens: torch.Tensor, live: torch.Tensor) -> None:
        """`append` for the rows in `slots` [k] (a prefill's first tokens)."""
        ring, match, count = self.ring[slots], self.match[slots], self.count[slots]
        match_new, at, kept = self._appended(ring, match, count, tokens, live)
        self.match.index_copy_(0, slots, match_new)
        self.ring.index_copy_(0, slots, ring.scatter(1, at, kept))
        self.count.index_copy_(0, slots, count + live.long())

    def _appended(self, ring: torch.Tensor, match: torch.Tensor, count: torch.Tensor, tokens: torch.Tensor,
                  live: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The rows' new suffix matches, the ring position of the new token and what goes there."""
        t = count[:, None]
        positions = torch.remainder(t - self.shifts[None, :], self.capacity)
        previous = ring.gather(1, positions)
        same = (previous == tokens[:, None]) & (self.shifts[None, :] <= t)
        grown = torch.where(same, match + 1, 0).to(match.dtype)
        at = torch.remainder(t, self.capacity)
        return torch.where(live[:, None], grown, match), at, torch.where(live[:, None], tokens[:, None], ring.gather(1, at))
