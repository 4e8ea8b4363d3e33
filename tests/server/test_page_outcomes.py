"""Each generated page's outcome, in the answer and in ocr_page_outcomes_total with the pod's revision."""

from __future__ import annotations

import base64
import re

import pytest

from . import samples

pytestmark = pytest.mark.server


def count(text: str, outcome: str) -> float:
    m = re.search(rf'^ocr_page_outcomes_total{{outcome="{outcome}",revision="rev-main"}} ([0-9.e+-]+)$', text, re.M)
    return float(m.group(1)) if m else -1.0


def test_a_page_cut_off_by_max_new_tokens_answers_truncated_and_is_counted_under_the_pods_revision(server):
    with server.client() as c:
        before = c.get("/metrics").text
        answer = c.post("/v1/ocr", json={"image": base64.b64encode(samples.png(300, 200, seed=77)).decode(), "max_new_tokens": 3}).json()
        after = c.get("/metrics").text
    assert answer["pages"][0]["finished"] is False
    assert answer["pages"][0]["outcome"] == "truncated"
    assert count(after, "truncated") == count(before, "truncated") + 1 and count(before, "truncated") >= 0
