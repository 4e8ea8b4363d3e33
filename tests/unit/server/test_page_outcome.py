"""The reference-free page outcomes (serving/outcome.py) on crafted generations."""

from __future__ import annotations

import random

from ocr_server.runtime.metrics import PAGE_OUTCOMES, Metrics
from ocr_server.serving import outcome as O

EOS = 1


def prose(n: int, seed: int = 0) -> list[int]:
    """Token ids with the statistics of text: no long span repeats."""
    rng = random.Random(seed)
    return [rng.randrange(3, 120_000) for _ in range(n)]


def test_a_page_that_repeats_one_line_until_its_budget_runs_out_is_a_loop():
    line = prose(37, seed=1)
    ids = prose(120) + line * 30
    assert O.classify([(ids, False)], "text") == O.LOOP


def test_a_loop_the_ngram_guard_bends_every_twentieth_token_is_still_a_loop():
    line = prose(15, seed=2)
    looped = (line * 200)[:2000]
    for i in range(19, len(looped), 20):  # the guard bans the token completing a repeated 20-gram
        looped[i] = 7 + i % 3
    assert O.classify([(prose(200) + looped, False)], "text") == O.LOOP


def test_a_page_cut_off_by_its_token_budget_is_truncated():
    assert O.classify([(prose(512), False)], "some text") == O.TRUNCATED


def test_a_page_that_ends_without_text_is_empty():
    assert O.classify([([EOS], True)], "  \n") == O.EMPTY


def test_a_page_of_prose_that_ends_with_eos_is_ok():
    assert O.classify([(prose(8000) + [EOS], True)], "a page of text") == O.OK


def test_a_short_answer_repeating_a_few_tokens_is_not_a_loop():
    assert O.classify([([5, 6] * 10 + [EOS], True)], "ab ab ab") == O.OK


def test_a_split_page_takes_its_worst_part():
    line = prose(30, seed=3)
    parts = [(prose(100) + [EOS], True), (line * 20, False), (prose(50), False)]
    assert O.classify(parts, "text") == O.LOOP
    assert O.classify([(prose(100) + [EOS], True), (prose(50), False)], "text") == O.TRUNCATED


def test_worst_orders_loop_truncated_empty_ok():
    assert O.worst([O.OK, O.EMPTY, O.TRUNCATED]) == O.TRUNCATED
    assert O.worst([O.EMPTY, O.LOOP]) == O.LOOP
    assert O.worst([]) == O.OK


def test_the_metrics_outcome_labels_are_the_classifiers():
    assert sorted(PAGE_OUTCOMES) == sorted(O.OUTCOMES)


def test_outcomes_are_counted_with_the_pods_revision_every_outcome_from_zero():
    m = Metrics(revision="5d8f7c")
    m.page_outcome(O.LOOP)
    text = m.render().decode()
    assert 'ocr_page_outcomes_total{outcome="loop",revision="5d8f7c"} 1.0' in text
    for outcome in O.OUTCOMES:
        assert f'ocr_page_outcomes_total{{outcome="{outcome}",revision="5d8f7c"}}' in text


TD, TD_END = 128821, 128822  # the tokenizer's <td> and </td>, the ids the n-gram guard lets repeat


def test_a_table_of_empty_cells_that_ends_with_eos_is_not_a_loop():
    ids = prose(40) + [TD, TD_END] * 300 + prose(20, seed=3)
    assert O.classify([(ids, True)], "table", allowed=frozenset({TD, TD_END})) == O.OK


def test_a_loop_between_cell_tags_is_still_a_loop():
    line = [TD] + prose(12, seed=4) + [TD_END]
    ids = prose(60) + line * 40
    assert O.classify([(ids, False)], "table", allowed=frozenset({TD, TD_END})) == O.LOOP


def test_cell_tags_repeated_until_the_budget_runs_out_are_a_loop():
    ids = prose(40) + [TD] * 600
    assert O.classify([(ids, False)], "table", allowed=frozenset({TD, TD_END})) == O.LOOP
