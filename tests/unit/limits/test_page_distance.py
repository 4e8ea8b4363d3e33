"""The quality gate's page distance (ocr_limits.quality.page_distance): one function the operator
(golden pages) and the server (shadow pages) both judge by."""

from __future__ import annotations

from ocr_limits.quality import MAX_PAGE_TEXT_CHARS, bounded_text, page_distance


def test_the_same_text_and_two_empty_texts_are_distance_zero():
    assert page_distance("Invoice 42", "Invoice 42") == 0.0
    assert page_distance("", "") == 0.0


def test_texts_with_nothing_in_common_are_distance_one():
    assert page_distance("abc", "") == 1.0
    assert page_distance("abc", "xyz") == 1.0


def test_the_distance_is_the_edit_count_over_the_longer_length_rounded_to_four_places():
    assert page_distance("abcdef", "abcxef") == round(1 / 6, 4) == 0.1667
    assert page_distance("abc", "abcd") == 0.25


def test_only_the_bounded_texts_are_compared():
    same_head = "a" * MAX_PAGE_TEXT_CHARS
    assert bounded_text(same_head + "tail") == same_head
    assert page_distance(same_head + "one tail", same_head + "another, longer tail") == 0.0
