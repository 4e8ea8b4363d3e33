"""vLLM's `min_tokens` for the transformers engine's generate path: a row's end of text is held back
until it has generated that many tokens (`ignore_eos` is min_tokens = max_tokens, see http/openai_chat.py).

A logits processor with one bound per row, because generate()'s own `min_new_tokens` is one number
for the whole batch while each request brings its own. It reads only the step count (no host sync).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch


class HoldEos:
    """Ban `eos` in each row that has produced fewer than its own minimum of new tokens."""

    def __init__(self, prompt_len: int, minimums: Sequence[int], eos: int) -> None:
        self.prompt_len, self.minimums, self.eos = prompt_len, list(minimums), eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        produced = input_ids.shape[1] - self.prompt_len
        rows = [row for row, least in enumerate(self.minimums) if produced < least]
        if rows:
            scores[rows, self.eos] = -math.inf
        return scores
