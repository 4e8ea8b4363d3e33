"""JSON bodies and options decoded without ambiguity (ocr_server.http.bodies)."""

from __future__ import annotations

import pytest

from ocr_server.http.bodies import parse_json, single_options
from ocr_server.runtime.errors import BadInput, InvalidOptions


@pytest.mark.parametrize("body,why", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a": {"b": 1, "b": 2}}', "field 'b' more than once"),
    (b'{"n": ' + b"9" * 5000 + b"}", "not valid JSON"),
    (b'{"image": "\xff"}', "not UTF-8"),
    (b'{"image": ', "not valid JSON: Expecting value at line 1 column 11"),
])
def test_json_that_would_be_ambiguous_or_crash_the_parser_is_a_400_saying_why(body, why):
    with pytest.raises(BadInput, match=why):
        parse_json(body)


def test_json_of_moderate_depth_and_distinct_keys_is_read():
    assert parse_json(b'{"a": [[[1]]], "b": {"c": 2}}') == {"a": [[[1]]], "b": {"c": 2}}


def test_an_option_is_taken_from_one_place_once():
    assert single_options(form=[("pages", "1")], query=[("split", "auto")]) == {"pages": "1", "split": "auto"}
    with pytest.raises(InvalidOptions, match="pages: given twice in the query"):
        single_options(query=[("pages", "1"), ("pages", "2")])
    with pytest.raises(InvalidOptions, match="pages: given in both the form and the query"):
        single_options(form=[("pages", "1")], query=[("pages", "1")])
