"""Prompt facts and Kubernetes timestamps, each written once in ocr_limits."""

from __future__ import annotations

import datetime as dt

from ocr_limits import prompts, timestamps
from ocr_limits.request_classes import BATCH, CLASSES, HEADER, INTERACTIVE


def test_the_modes_are_the_two_document_prompts_each_placing_the_page_first():
    assert prompts.MODES == ("markdown", "free")
    assert all(p.startswith(prompts.IMAGE + "\n") for p in prompts.PROMPTS.values())
    assert "<|grounding|>" in prompts.PROMPTS["markdown"] and "<|grounding|>" not in prompts.PROMPTS["free"]


def test_a_prompt_is_bounded_in_characters_and_tokens():
    assert (prompts.MAX_PROMPT_CHARS, prompts.MAX_PROMPT_TOKENS) == (8192, 1024)


def test_interactive_requests_are_served_before_batch_ones():
    assert CLASSES == (INTERACTIVE, BATCH) == ("interactive", "batch") and HEADER == "X-Request-Class"


def test_an_aware_time_is_written_in_utc_with_a_z():
    cet = dt.timezone(dt.timedelta(hours=1))
    assert timestamps.iso(dt.datetime(2026, 12, 4, 1, 2, 3, 456789, tzinfo=cet)) == "2026-12-04T00:02:03Z"


def test_a_naive_time_is_taken_as_utc_not_local_time():
    assert timestamps.iso(dt.datetime(2026, 12, 4, 1, 2, 3)) == "2026-12-04T01:02:03Z"


def test_micro_time_keeps_microseconds_as_a_lease_needs():
    when = dt.datetime(2026, 12, 4, 1, 2, 3, 45, tzinfo=dt.timezone.utc)
    assert timestamps.iso_micro(when) == "2026-12-04T01:02:03.000045Z"
