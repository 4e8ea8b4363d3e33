"""Grounded output parsing, the n-gram guard, the cache and the batcher."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from types import SimpleNamespace

import torch

from ocr_server.engines.batcher import Batcher
from ocr_server.serving.cache import ResultCache, cache_key
from ocr_server.engines.transformers.ngram_guard import WindowedNoRepeatNGram
from ocr_server.runtime.errors import DeadlineExceeded
from ocr_server.runtime.metrics import Metrics
from ocr_server.serving.grounding import parse_output

RAW = ("<|ref|>title<|/ref|><|det|>[[100, 50, 900, 120]]<|/det|>\n# Report\n\n"
       "<|ref|>text<|/ref|><|det|>[[100, 150, 900, 400], [100, 420, 500, 500]]<|/det|>\nHello world.\n"
       "<|ref|>image<|/ref|><|det|>[[0, 600, 999, 999]]<|/det|>\n<｜end▁of▁sentence｜>")


def test_grounded_output_becomes_blocks_with_pixel_boxes():
    parsed = parse_output(RAW, width=1998, height=999)
    assert [b.label for b in parsed.blocks] == ["title", "text", "image"]
    assert parsed.blocks[0].boxes == [[200, 50, 1800, 120]]
    assert parsed.blocks[1].boxes[1] == [200, 420, 1000, 500] and parsed.blocks[1].text == "Hello world."
    assert parsed.blocks[2].text.startswith("![](")


def test_clean_text_has_no_grounding_tags():
    parsed = parse_output(RAW, 1000, 1000)
    assert "<|ref|>" not in parsed.text and "<|det|>" not in parsed.text and "end▁of" not in parsed.text
    assert parsed.text.startswith("# Report") and "Hello world." in parsed.text
    assert "<|ref|>" in parsed.raw


def test_garbage_output_never_raises():
    for raw in ["<|ref|>x<|/ref|><|det|>[[a,b]]<|/det|>", "<|det|>", "plain", "", "<|ref|><|/ref|><|det|>[[5,5,1,1]]<|/det|>"]:
        parse_output(raw, 10, 10)


def test_ngram_guard_bans_the_repeating_token_but_not_td():
    guard = WindowedNoRepeatNGram(prompt_len=1, ngram=3, window=90, whitelist={7})
    ids = torch.tensor([[0, 1, 2, 3, 1, 2]])  # generated: 1 2 3 1 2 -> "3" would repeat "1 2 3"
    scores = guard(ids, torch.zeros(1, 10))
    assert scores[0, 3] == -math.inf and torch.isfinite(scores[0, [0, 1, 2, 4]]).all()
    wl = WindowedNoRepeatNGram(prompt_len=1, ngram=3, window=90, whitelist={3})
    assert torch.isfinite(wl(ids, torch.zeros(1, 10))).all()


def test_ngram_guard_only_looks_inside_its_window():
    guard = WindowedNoRepeatNGram(prompt_len=0, ngram=2, window=3, whitelist=set())
    ids = torch.tensor([[5, 6, 1, 2, 5]])  # "5 6" is outside the last 3 tokens
    assert torch.isfinite(guard(ids, torch.zeros(1, 10))).all()


def test_cache_is_bounded_and_keyed_by_options():
    cache = ResultCache(2, max_bytes=1 << 20)
    k1, k2, k3 = (cache_key(b"x", {"m": i}, "r") for i in range(3))
    assert k1 != k2 and cache_key(b"x", {"m": 0}, "r") == k1
    for k in (k1, k2, k3):
        cache.put(k, {"k": k})
    assert len(cache) == 2 and cache.get(k1) is None and cache.get(k3) == {"k": k3}


def _item(deadline=math.inf):
    return SimpleNamespace(deadline=deadline, cancelled=threading.Event(), request_class="interactive")


def test_batcher_groups_concurrent_pages_and_drops_expired_ones():
    calls = []

    def run(items):
        calls.append(len(items))
        time.sleep(0.05)
        return [f"r{id(i)}" for i in items]

    async def scenario():
        b = Batcher(run, batch_size=4, wait_s=0.05, metrics=Metrics(), on_fatal=lambda e: None)
        b.start()
        live = [_item(time.monotonic() + 5) for _ in range(6)]
        expired = _item(time.monotonic() - 1)
        results = await asyncio.gather(*(b.submit(i) for i in live), b.submit(expired), return_exceptions=True)
        await b.stop()
        return results

    results = asyncio.run(scenario())
    assert isinstance(results[-1], DeadlineExceeded)
    assert all(isinstance(r, str) for r in results[:-1])
    assert sum(calls) == 6 and max(calls) == 4


def test_each_generate_batch_counts_as_one_prefill_of_its_pages_and_its_time_as_generate_work():
    metrics, calls = Metrics(), []

    def run(items):
        calls.append(len(items))
        time.sleep(0.05)
        return [f"r{id(i)}" for i in items]

    async def scenario():
        b = Batcher(run, batch_size=4, wait_s=0.05, metrics=metrics, on_fatal=lambda e: None)
        b.start()
        await asyncio.gather(*(b.submit(_item(time.monotonic() + 5)) for _ in range(6)))
        await b.stop()

    asyncio.run(scenario())
    value = metrics.registry.get_sample_value
    assert value("ocr_prefill_pages_sum") == 6
    assert value("ocr_prefill_pages_count") == len(calls) and max(calls) == 4
    assert value("ocr_prefill_pages_bucket", {"le": "3.0"}) == sum(n <= 3 for n in calls)
    assert 0.05 * len(calls) <= value("ocr_engine_busy_seconds_total", {"work": "generate"}) < 1
