"""Each generated page's outcome, in the answer and in ocr_page_outcomes_total with the pod's revision."""

from __future__ import annotations

import base64
import re

import pytest

from ocr_server_testing import tiny_cache

from . import samples
from .conftest import start_server

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


@pytest.fixture(scope="module")
def looping_server(tmp_path_factory):
    model = tiny_cache.cached(loop=True)  # the looping tiny model, read-only
    server = start_server(tmp_path_factory.mktemp("looping-server"), {"MODEL_PATH": str(model), "OCR_REVISION": "rev-loop"})
    yield server
    server.stop()


def test_the_test_helpers_looping_model_answers_loop_past_the_ngram_guard_and_is_counted(looping_server):
    with looping_server.client() as c:
        answer = c.post("/v1/ocr", json={"image": base64.b64encode(samples.png(300, 200, seed=78)).decode(),
                                         "max_new_tokens": 64}).json()
        metrics = c.get("/metrics").text
    page = answer["pages"][0]
    assert page["outcome"] == "loop" and page["usage"]["generated_tokens"] == 64 and page["finished"] is False
    assert 'ocr_page_outcomes_total{outcome="loop",revision="rev-loop"} 1.0' in metrics
