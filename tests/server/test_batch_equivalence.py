"""Batching changes nothing: same greedy tokens alone, in a mixed-size batch, and in plain transformers."""

from __future__ import annotations

import pytest
import torch

from . import samples

pytestmark = [pytest.mark.server, pytest.mark.slow]
NEW = 12  # below the n-gram size (20), so the guard cannot act and plain generate is comparable


@pytest.fixture(scope="module")
def engine(tiny_native):
    from ocr_server.runtime.config import load_config
    from ocr_server.engines.transformers.engine import Engine

    e = Engine(load_config(env={"MODEL_PATH": str(tiny_native), "DEVICE": "cpu", "MAX_NEW_TOKENS": str(NEW)}))
    e.load()
    return e


def test_the_tiny_model_reads_the_page_so_identity_tests_can_tell_pages_apart(engine):
    """Two pages of one size (same crops, same prompt ids), other content: other tokens. Without
    that (SAM drawn with its config's 1e-10 init) a batch that gave a row another page's pixels
    would still pass every identity test."""
    a, b = (engine.prepare(samples.page(500, 400, seed), prompt_mode="free", max_visual_tokens=None, max_new_tokens=NEW)
            for seed in (1, 2))
    assert a.input_ids == b.input_ids
    assert engine.generate_batch([a])[0].token_ids != engine.generate_batch([b])[0].token_ids


def test_same_tokens_alone_and_inside_a_batch_of_different_sizes(engine):
    pages = [samples.page(500, 400, 1), samples.page(2000, 1000, 2), samples.page(900, 1800, 3)]
    prepared = [engine.prepare(p, prompt_mode="markdown", max_visual_tokens=None, max_new_tokens=NEW) for p in pages]
    assert [p.plan.crops for p in prepared] == [0, 2, 2]
    assert len({len(p.input_ids) for p in prepared}) == 2  # different prompt lengths: left padding is exercised
    alone = [engine.generate_batch([p])[0].token_ids for p in prepared]
    batched = [g.token_ids for g in engine.generate_batch(prepared)]
    assert batched == alone
    assert all(len(t) == NEW for t in alone)


def test_same_tokens_as_plain_transformers_generate(engine):
    from transformers import DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor

    page = samples.page(1600, 900, 4)  # an even margin (448 rows): transformers' own padding agrees with ImageOps.pad
    ours = engine.generate_batch([engine.prepare(page, prompt_mode="free", max_visual_tokens=None, max_new_tokens=NEW)])[0]
    processor = DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=engine.tokenizer)
    inputs = processor(images=page, text="<image>\nFree OCR.", return_tensors="pt")
    # our default MAX_VISUAL_TOKENS (1024) allows 5 crops, transformers' default 6: same grid for this page
    with torch.inference_mode():
        out = engine.model.generate(**inputs, max_new_tokens=NEW, do_sample=False)
    plain = out[0, inputs["input_ids"].shape[1]:].tolist()
    assert ours.token_ids == plain


def test_streamed_tokens_of_each_row_are_exactly_its_returned_tokens(engine):
    """Three rows with their own budgets in one batch: each row's on_token sees what generate_batch returns."""
    pages = [samples.page(500, 400, 5), samples.page(900, 1800, 6), samples.page(300, 300, 7)]
    budgets = [NEW, 3, 7]
    prepared = [engine.prepare(p, prompt_mode="free", max_visual_tokens=None, max_new_tokens=n) for p, n in zip(pages, budgets)]
    seen = [[] for _ in prepared]
    for item, out in zip(prepared, seen):
        item.on_token = out.append
    results = engine.generate_batch(prepared)
    assert [len(r.token_ids) for r in results] == budgets
    assert seen == [r.token_ids for r in results]
    decoder = engine.stream_decoder()
    assert "".join(decoder.push(t) for t in seen[0]) == results[0].raw
