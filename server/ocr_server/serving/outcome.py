"""Reference-free quality signals: what became of each page's generation. Pure (numpy only).

Every generated page is one of:

- ``loop``: the output repeats itself. A page loops when at least ``LOOP_MIN_REPEATED`` of its
  ``LOOP_NGRAM``-token n-grams, and at least ``LOOP_SHARE`` of them, already occurred earlier in
  the same page. An exact loop repeats every n-gram after its first cycle; a loop the server's
  n-gram guard bends (it bans the token that would complete a 20-gram seen in the last 90 tokens,
  so the model changes one token and goes on) still repeats all the short n-grams between the
  bends, so a guarded loop counts too. Prose and tables with content repeat few 8-grams; n-grams
  made only of the ids the guard lets repeat (the table cell tags) are not counted in a page that
  ended with EOS, so a table of empty cells is no loop (cell tags until the budget runs out are).
- ``truncated``: the token budget (max_new_tokens) ran out before the end-of-sequence token.
- ``empty``: the model ended the page without any text (only whitespace or special tokens).
- ``ok``: none of these.

A page that loops until its budget runs out is a ``loop`` (the cause), not ``truncated``. A page
split into parts takes the worst of its parts (``worst``: loop, truncated, empty, ok).

The measure works on token ids, the same for both engines: each reports the ids it generated and
whether it ended with EOS (engines.api.Generated). Each n-gram is hashed by a fixed polynomial over
uint64 (wrapping) and the distinct hashes counted with numpy (bench/outcome_cost.py measures the
cost per page).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

OK, LOOP, TRUNCATED, EMPTY = "ok", "loop", "truncated", "empty"
OUTCOMES = (OK, LOOP, TRUNCATED, EMPTY)
# Worst first: the outcome of a page made of several parts, or of a document of several pages.
SEVERITY = (LOOP, TRUNCATED, EMPTY, OK)

LOOP_NGRAM = 8
LOOP_MIN_REPEATED = 48
LOOP_SHARE = 0.5

_BASE = np.uint64(0x100000001B3)  # the FNV-1a 64-bit prime: any odd multiplier spreads the ids


def repeated_ngrams(token_ids: Sequence[int], n: int = LOOP_NGRAM,
                    allowed: frozenset[int] = frozenset()) -> tuple[int, int]:
    """(n-grams that already occurred earlier in the sequence, n-grams in all); n-grams made only
    of `allowed` ids (the table cell tags the n-gram guard lets repeat) are left out of both."""
    count = len(token_ids) - n + 1
    if count <= 1:
        return 0, max(count, 0)
    raw = np.asarray(token_ids, dtype=np.uint64)
    ids = raw + np.uint64(1)
    h = np.zeros(count, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            h = h * _BASE + ids[k:k + count]
    if allowed:
        other = np.concatenate(([0], np.cumsum(~np.isin(raw, np.fromiter(allowed, dtype=np.uint64)))))
        h = h[other[n:] - other[:count] > 0]  # windows with at least one other token
        count = int(h.size)
    return count - int(np.unique(h).size), count


def is_loop(token_ids: Sequence[int], n: int = LOOP_NGRAM, min_repeated: int = LOOP_MIN_REPEATED,
            share: float = LOOP_SHARE, allowed: frozenset[int] = frozenset()) -> bool:
    repeated, total = repeated_ngrams(token_ids, n, allowed)
    return repeated >= min_repeated and repeated >= share * total


def classify(parts: Sequence[tuple[Sequence[int], bool]], text: str, allowed: frozenset[int] = frozenset()) -> str:
    """One page's outcome from its parts' generated ids and whether each ended with EOS (one part
    unless the page was split), and the page's text without special tokens and grounding.
    `allowed`: ids whose repetition is no loop (engines.api.ModelInfo.repeat_allowed) in a part that
    ended with EOS; repeating only them until the budget runs out is a loop still."""
    if any(is_loop(ids, allowed=allowed if finished else frozenset()) for ids, finished in parts):
        return LOOP
    if not all(finished for _, finished in parts):
        return TRUNCATED
    if not text.strip():
        return EMPTY
    return OK


def worst(outcomes: Iterable[str]) -> str:
    """The most severe of `outcomes` (ok when there are none)."""
    seen = set(outcomes)
    return next((o for o in SEVERITY if o in seen), OK)
