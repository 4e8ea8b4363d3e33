"""The tensor n-gram guard bans exactly the tokens the reference guard (WindowedNoRepeatNGram) bans."""

from __future__ import annotations

import math
import random

import torch

from ocr_server.engines.transformers.ngram_guard import WindowedNoRepeatNGram
from ocr_server.engines.transformers.ngram_guard import TensorNGramGuard

VOCAB = 12  # a small vocabulary: random sequences repeat n-grams often


def reference_bans(rows: list[list[int]], settings: list[tuple[int, int, set[int]]]) -> list[set[int]]:
    """The tokens the reference guard sets to -inf for each row, given its generated tokens."""
    out = []
    for tokens, (n, window, white) in zip(rows, settings):
        guard = WindowedNoRepeatNGram(0, n, window, white, rows=[(n, window, white)])
        scores = guard(torch.tensor([tokens], dtype=torch.long).reshape(1, -1), torch.zeros(1, VOCAB))
        out.append({i for i in range(VOCAB) if scores[0, i] == -math.inf})
    return out


def looping(rng: random.Random, length: int) -> list[int]:
    """Random tokens that fall into short loops now and then, as an untrained model does."""
    seq: list[int] = []
    while len(seq) < length:
        if seq and rng.random() < 0.4:
            back = rng.randint(1, min(len(seq), 8))
            seq.extend(seq[-back:][: length - len(seq)])
        else:
            seq.append(rng.randrange(VOCAB))
    return seq


def test_tensor_guard_bans_what_the_reference_bans_on_random_sequences_step_by_step():
    rng = random.Random(7)
    slots, length = 6, 70
    settings = [(rng.choice([0, 1, 2, 3, 4, 6]), rng.choice([1, 5, 9, 30, 90]),
                 set(rng.sample(range(VOCAB), rng.choice([0, 1, 3])))) for _ in range(slots)]
    settings[0] = (3, 90, set())  # the defaults' shape, always present
    sequences = [looping(rng, length) for _ in range(slots)]
    guard = TensorNGramGuard(slots, capacity=length, vocab=VOCAB, device="cpu")
    for slot, (n, window, white) in enumerate(settings):
        guard.reset(slot, n, window, white)
    live = torch.ones(slots, dtype=torch.bool)
    acted = 0
    for t in range(length):
        prefix = [seq[:t] for seq in sequences]
        want = reference_bans(prefix, settings)
        got = guard.bans(slots)
        assert [set(torch.nonzero(row).flatten().tolist()) for row in got] == want, t
        acted += sum(bool(w) for w in want)
        guard.append(torch.tensor([seq[t] for seq in sequences]), live)
    assert acted > 50  # the comparison covered many steps where the guard banned something


def test_a_slot_that_is_not_live_keeps_its_guard_state():
    guard = TensorNGramGuard(2, capacity=16, vocab=VOCAB, device="cpu")
    for slot in range(2):
        guard.reset(slot, 2, 16, ())
    both = torch.ones(2, dtype=torch.bool)
    for tok in (3, 4):
        guard.append(torch.tensor([tok, tok]), both)
    guard.append(torch.tensor([3, 3]), torch.tensor([True, False]))  # slot 1 finished: its 3 is not its
    got = guard.bans(2)
    assert torch.nonzero(got[0]).flatten().tolist() == [4]  # 3,4 seen; prefix 3 bans 4
    assert torch.nonzero(got[1]).flatten().tolist() == []  # prefix 4 never seen before


def test_reset_gives_a_reused_slot_a_fresh_history():
    guard = TensorNGramGuard(1, capacity=16, vocab=VOCAB, device="cpu")
    guard.reset(0, 1, 16, ())
    guard.append(torch.tensor([5]), torch.tensor([True]))
    assert guard.bans(1)[0, 5]
    guard.reset(0, 1, 16, ())
    assert not guard.bans(1).any()
