"""generate()'s per-row hooks for a static batch: each row's streamed tokens and its own stopping point.

DECODER=generate decodes a static batch with transformers' generate(), which knows one budget and
one streamer per batch; a batch here holds pages of different requests, each with its own budget,
deadline, cancellation and token callback.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import torch

if TYPE_CHECKING:
    from .engine import TensorPage


class RowStreamer:
    """transformers streamer for a whole batch: hands each row's kept tokens to its `on_token`.

    generate() calls put() once with the prompt, then once per step with one token per row. A row
    keeps a token until its EOS or its own max_new_tokens; tokens after that (padding for finished
    rows) are dropped. Pad tokens are held back until a later token of the row shows they were not
    trailing (generate_batch strips trailing padding of unfinished rows): so the streamed tokens are
    exactly the returned ones.
    """

    def __init__(self, items: list[TensorPage], eos: int, pad: int) -> None:
        self.items, self.eos, self.pad = items, eos, pad
        self.count = [0] * len(items)
        self.done = [it.on_token is None for it in items]
        self.held = [0] * len(items)
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # the first call carries the prompt ids
            self.prompt_seen = True
            return
        for row, tok in enumerate(value.reshape(-1).tolist()):
            if self.done[row]:
                continue
            item = self.items[row]
            self.count[row] += 1
            if self.count[row] > item.max_new_tokens:
                self.done[row] = True
                continue
            if tok == self.eos:  # finished: padding before the EOS is kept, as generate_batch keeps it
                for _ in range(self.held[row]):
                    item.on_token(self.pad)
                self.done[row] = True
                continue
            if tok == self.pad:
                self.held[row] += 1
                continue
            for _ in range(self.held[row]):
                item.on_token(self.pad)
            self.held[row] = 0
            item.on_token(tok)
            if self.count[row] >= item.max_new_tokens:
                self.done[row] = True

    def end(self) -> None:
        """Nothing to flush: held pads were trailing."""


class RowStop:
    """Stopping criterion per row: own token budget, deadline, cancellation. generate() calls it
    once per generated token; from the second on (decode steps, not the prefill) it reports the
    batch's row count to `on_step` (metrics: rows per decode step)."""

    def __init__(self, prompt_len: int, items: list[TensorPage], clock: Callable[[], float] = time.monotonic,
                 on_step: Callable[[int], None] | None = None) -> None:
        self.prompt_len, self.items, self.clock, self.on_step = prompt_len, items, clock, on_step
        self.early = [False] * len(items)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        produced = input_ids.shape[1] - self.prompt_len
        if produced > 1 and self.on_step is not None:
            self.on_step(len(self.items))  # a static batch decodes every row, finished or not
        now = self.clock()
        done = []
        for i, item in enumerate(self.items):
            late = now > item.deadline or item.cancelled.is_set()
            self.early[i] = self.early[i] or late
            done.append(produced >= item.max_new_tokens or late)
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)
