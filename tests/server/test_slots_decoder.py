"""DECODER=slots gives the tokens generate() gives: pages alone, mixed crop counts, rows joining
mid-flight, per-row budgets and EOS, the n-gram guard acting, cancellation and deadlines, and each
experts implementation. In process, on the CPU, with the tiny model (eager steps, no graphs).

Two models: the tiny model as written (its random head never loops), and the same model with its
output head tied to its input embeddings, which makes it repeat its current token as an untrained
model does, so the n-gram guard (n 20, window 90) must act every 20 tokens.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
import torch

from . import samples

pytestmark = [pytest.mark.server, pytest.mark.slow]
NEW = 16
LOOP_NEW = 64  # past 60: the looping model's guard acts at 20, 40 and 60
# (width, height) -> crops: the global view alone, 2 crops, 3 crops; prompts of three lengths
PAGES = {(500, 400): 0, (2000, 1000): 2, (1500, 500): 3}


def slots_engine(model_dir, new_tokens: int):
    from ocr_server.runtime.config import load_config
    from ocr_server.engines.transformers.engine import Engine

    engine = Engine(load_config(env={"MODEL_PATH": str(model_dir), "DEVICE": "cpu", "MAX_NEW_TOKENS": str(new_tokens),
                                     "DECODER": "slots", "DECODE_SLOTS": "4"}))
    engine.load()
    return engine


@pytest.fixture(scope="module")
def engine(tiny_native):
    return slots_engine(tiny_native, NEW)


@pytest.fixture(scope="module")
def looping(tiny_native):
    e = slots_engine(tiny_native, LOOP_NEW)
    with torch.no_grad():
        e.model.lm_head.weight.copy_(e.model.model.language_model.embed_tokens.weight)
    return e


def prepare(engine, size, seed: int, new: int = NEW, mode: str = "free"):
    return engine.prepare(samples.page(*size, seed=seed), prompt_mode=mode, max_visual_tokens=None, max_new_tokens=new)


@pytest.fixture(scope="module")
def alone(engine) -> dict:
    """Each page alone through generate(): the reference tokens."""
    return {size: engine.generate_reference([prepare(engine, size, i)])[0].token_ids for i, size in enumerate(PAGES)}


def items(engine, new: int = NEW) -> list:
    return [prepare(engine, size, i, new) for i, size in enumerate(PAGES)]


def test_each_page_alone_gets_the_tokens_generate_gives(engine, alone):
    pages = items(engine)
    assert [p.plan.crops for p in pages] == list(PAGES.values())
    assert len({len(p.input_ids) for p in pages}) == 3
    for page, size in zip(pages, PAGES):
        got = engine.generate_batch([page])[0]
        assert got.token_ids == alone[size], size
        assert len(got.token_ids) == NEW


def test_pages_sent_as_uint8_and_normalised_on_the_device_get_the_same_tokens(engine, alone):
    """The GPU's way (pixels.py), forced on the CPU: the workers skip normalising, collate does it."""
    from ocr_server.engines.transformers.pixels import normalisation_table

    engine.uint8_pixels, engine.pixel_table = True, normalisation_table(engine.image_processor).to(engine.model.dtype)
    try:
        pages = items(engine)
        assert all(p.pixel_values.dtype == torch.uint8 for p in pages)
        assert [g.token_ids for g in engine.generate_batch(pages)] == list(alone.values())
    finally:
        engine.uint8_pixels, engine.pixel_table = False, None


def test_pages_of_mixed_crop_counts_decoded_together_get_their_alone_tokens(engine, alone):
    got = engine.generate_batch(items(engine))
    assert [g.token_ids for g in got] == list(alone.values())
    assert max(engine.slots.step_seconds) >= 3  # they shared steps: a bucket of 3+ rows ran


def test_rows_joining_mid_flight_get_their_alone_tokens(engine, alone):
    slots = engine.slots
    first, second, third = items(engine)
    ended = {}
    assert slots.admit(first) is None
    for _ in range(5):
        ended.update({id(f.item): f for f in slots.step()})
    assert slots.admit(second) is None
    for _ in range(3):
        ended.update({id(f.item): f for f in slots.step()})
    assert slots.admit(third) is None
    assert len(slots.rows) == 3
    while not slots.idle():
        ended.update({id(f.item): f for f in slots.step()})
    assert [ended[id(p)].token_ids for p in (first, second, third)] == list(alone.values())


def test_each_row_stops_at_its_own_budget_and_streams_exactly_its_tokens(engine, alone):
    budgets = [NEW, 3, 7]
    pages = [prepare(engine, size, i, n) for (i, size), n in zip(enumerate(PAGES), budgets)]
    seen = [[] for _ in pages]
    for page, out in zip(pages, seen):
        page.on_token = out.append
    got = engine.generate_batch(pages)
    reference = engine.generate_reference([prepare(engine, size, i, n) for (i, size), n in zip(enumerate(PAGES), budgets)])
    assert [g.token_ids for g in got] == [r.token_ids for r in reference]
    assert [g.token_ids for g in got] == [alone[size][:n] for size, n in zip(PAGES, budgets)]
    assert seen == [g.token_ids for g in got]
    assert not any(g.finished or g.stopped_early for g in got)


def test_a_row_ending_with_eos_ends_where_generate_ends_it_and_frees_its_slot(looping):
    eos = looping.tokenizer.eos_token_id
    size = (500, 400)
    before = looping.generate_reference([prepare(looping, size, 0, LOOP_NEW)])[0].token_ids
    later = next(t for t in before if t != before[0])  # the token the guard makes it switch to
    head = looping.model.lm_head.weight
    saved = head[eos].clone()
    try:
        with torch.no_grad():
            head[eos] = head[later] * 1.01  # EOS wins wherever `later` would have won
        reference = looping.generate_reference([prepare(looping, size, 0, LOOP_NEW), prepare(looping, (300, 300), 5, 9)])
        got = looping.generate_batch([prepare(looping, size, 0, LOOP_NEW), prepare(looping, (300, 300), 5, 9)])
    finally:
        with torch.no_grad():
            head[eos] = saved
    assert [g.token_ids for g in got] == [r.token_ids for r in reference]
    assert got[0].finished and reference[0].finished and len(got[0].token_ids) == before.index(later)
    assert looping.slots.free_slots() == looping.slots.plan.slots


def repeated_ngram(tokens: list[int], n: int = 20, window: int = 90) -> bool:
    for end in range(n, len(tokens) + 1):
        gram = tokens[end - n:end]
        if gram in [tokens[i:i + n] for i in range(max(0, end - 1 - window), end - n)]:
            return True
    return False


def test_the_guard_acts_past_60_tokens_as_in_generate(looping):
    from ocr_server.engines.api import NGramSettings

    pages = [prepare(looping, size, i, LOOP_NEW) for i, size in enumerate(list(PAGES)[:2])]
    got = looping.generate_batch(pages)
    reference = looping.generate_reference([prepare(looping, size, i, LOOP_NEW) for i, size in enumerate(list(PAGES)[:2])])
    assert [g.token_ids for g in got] == [r.token_ids for r in reference]
    unguarded = prepare(looping, list(PAGES)[0], 0, LOOP_NEW)
    unguarded.ngram = NGramSettings(size=0)
    loop = looping.generate_batch([unguarded])[0].token_ids
    assert repeated_ngram(loop)  # without the guard the model repeats itself ...
    for g in got:  # ... with it, never a 20-gram within the window, and it had to act after 60 tokens
        assert len(g.token_ids) == LOOP_NEW and not repeated_ngram(g.token_ids)
    assert got[0].token_ids[:60] != loop[:60] and got[0].token_ids[60:] != loop[60:]


def test_cancelled_and_expired_rows_leave_at_once_with_a_prefix_of_their_tokens(engine, alone):
    slots = engine.slots
    kept, cancelled, expired = items(engine)
    for page in (kept, cancelled, expired):
        assert slots.admit(page) is None
    for _ in range(3):
        assert slots.step() == []
    free = slots.free_slots()
    cancelled.cancelled.set()
    expired.deadline = time.monotonic() - 1
    left = {id(f.item): f for f in slots.step()}
    assert set(left) == {id(cancelled), id(expired)}
    assert slots.free_slots() == free + 2  # both slots free before the next step
    for page, size in ((cancelled, list(PAGES)[1]), (expired, list(PAGES)[2])):
        f = left[id(page)]
        assert f.stopped_early and not f.finished
        assert 1 <= len(f.token_ids) < NEW and f.token_ids == alone[size][:len(f.token_ids)]
    rest = []
    while not slots.idle():
        rest += slots.step()
    assert [f.token_ids for f in rest] == [alone[list(PAGES)[0]]]


def decoder(engine, model=None, **plan):
    """Another slots decoder on the engine's model (or `model`), with plan fields changed."""
    from ocr_server.engines.transformers.slots import SlotDecoder

    return SlotDecoder(model or engine.model, replace(engine.slots.plan, **plan), eos=engine.tokenizer.eos_token_id,
                       pad=engine.tokenizer.pad_token_id, pixels=engine._on_device, ngram_for=engine.ngram_settings)


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm", "eager"])
def test_each_experts_implementation_gives_the_same_tokens(engine, alone, experts):
    got = decoder(engine, experts=experts).run(items(engine))
    assert [f.token_ids for f in got] == list(alone.values())


def joining_mid_flight(slots, pages: list, after: int) -> list[list[int]]:
    """The first page alone for `after` steps, then the others joining it together in one prefill;
    each page's tokens once every row has ended."""
    first, *rest = pages
    slots.admit(first)
    ended = {}
    for _ in range(after):
        ended.update({id(f.item): f for f in slots.step()})
    slots.admit(rest)
    assert len(slots.rows) == len(pages)
    while not slots.idle():
        ended.update({id(f.item): f for f in slots.step()})
    return [ended[id(p)].token_ids for p in pages]


def test_pages_prefilled_together_in_one_vision_pass_get_their_alone_tokens_at_once_and_mid_flight(engine, alone):
    """Three pages of 0, 2 and 3 crops in one prefill (every global view in one vision forward, the
    five crops in another, the prompts right-padded in one language-model pass); then the first
    page alone, and the other two joining it together after three of its steps."""
    slots = decoder(engine, vision_views=8)
    assert [f.token_ids for f in slots.run(items(engine))] == list(alone.values())
    assert joining_mid_flight(slots, items(engine), after=3) == list(alone.values())


def test_attention_over_each_rows_own_length_gets_the_tokens_generate_gives(engine, alone):
    """FlexAttention with a block mask from the rows' positions (step.py), run eagerly on the CPU:
    each row reads the key blocks up to its own length over the whole slot, not a shared bucket."""
    slots = decoder(engine, attention="flex")
    assert slots.attention == "flex"
    assert joining_mid_flight(slots, items(engine), after=5) == list(alone.values())  # rows of different lengths


@pytest.mark.parametrize("attention", ["bucket", "flex"])
def test_the_compiled_step_traces_each_region_whole_and_gets_the_tokens_generate_gives(engine, alone, attention):
    """DECODE_COMPILE's step through torch.compile, each region traced whole (fullgraph: a graph
    break, e.g. a host read, fails it) and run by aot_eager, which executes the traced graph without generating
    kernels (inductor's code generation costs 11-21 s a shape on 2 cores; the GPU check runs it),
    rows joining mid-flight, with the guard on; with flex attention, as on a GPU, too."""
    import torch._dynamo

    from ocr_server.engines.transformers.step import decode_step

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    slots = decoder(engine, compile="aot_eager", attention=attention)
    assert slots.compiled and slots.step_fn is not decode_step and slots.attention == attention
    assert joining_mid_flight(slots, items(engine), after=3) == list(alone.values())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2  # a graph per shape: 1 row, then 4 (the bucket of 3)
    assert not torch._dynamo.utils.counters["graph_break"]


def deeper(engine, routed_layers: int):
    """A slots decoder over a copy of the engine's model with `routed_layers` more routed-expert
    layers (copies of its last one: their own weights and cache)."""
    import copy

    model = copy.deepcopy(engine.model)
    layers = model.model.language_model.layers
    for _ in range(routed_layers):
        layers.append(copy.deepcopy(layers[-1]))
    return decoder(engine, model, compile="aot_eager", slots=8, slot_buckets=(1, 2, 4, 8))


def test_the_compiled_step_compiles_each_region_three_times_for_four_row_buckets_whatever_the_depth(engine):
    """As the capture runs the shapes (largest first, free slots): 8 rows compiled for its sizes, 4
    rows making the row count symbolic, 2 rows reusing that graph, a single row its own; for each
    region: embed, sample, and the layer once for the dense kind and once for the routed kind, not
    once a layer (the tiny model has one of each; with 2 routed layers more, 3 of the 4 layers share
    a graph: one a layer would be 18). On a GPU's 7 row buckets and 12 layers, 3 compiles of 4 small
    graphs where the whole step compiled 3 times 12 layers."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    slots = deeper(engine, routed_layers=2)
    assert slots.moe == [False, True, True, True]
    with torch.inference_mode():
        for rows in (8, 4, 2, 1):
            slots.step_fn(slots, rows, slots.plan.kv_buckets[0], True)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 3 * 4


def test_a_capture_that_fails_falls_back_to_bucket_attention_compiled_then_to_the_eager_step(engine):
    """What capture() does after a failure on a GPU: one step down at a time, then it gives up. The
    compiled step keeps trying with bucket attention before the eager step: flex's kernels with a
    symbolic row count are what may not build (on a CPU, inductor's C++ flex kernel does not)."""
    from ocr_server.engines.transformers.step import decode_step

    slots = decoder(engine, compile="aot_eager", attention="flex")
    ladder = []
    while slots.fall_back("capturing failed"):
        ladder.append((slots.compiled, slots.attention))
    assert ladder == [(True, "bucket"), (False, "flex"), (False, "bucket")]
    assert slots.step_fn is decode_step
    eager = decoder(engine, attention="bucket")
    assert not eager.fall_back("capturing failed")


def test_joining_pages_and_decode_steps_wait_for_the_device_at_most_once_each(engine):
    """Counted as a GPU would wait (bench/dispatch_count.py), on the CPU: a prefill of three pages
    reads nothing back but its first tokens (one copy for all, read with the next step), and each
    decode step one copy of its tokens; generate() on one page, counted the same way, waits at
    every step."""
    from bench.dispatch_count import HostSyncs, admit_and_decode

    pages = items(engine, 4)
    with HostSyncs() as syncs:
        slots = decoder(engine)  # made inside: its host buffers are known as host memory
        slots.run([prepare(engine, (300, 300), 9, 2)])  # SAM's position indices are made once per size
        joined, per_step = admit_and_decode(syncs, slots, pages)
    assert sum(joined.values()) <= 2 * len(pages), dict(syncs.counts)
    assert per_step and max(per_step) <= 1, (per_step, dict(syncs.counts))
    with HostSyncs() as syncs:
        engine.generate_reference([prepare(engine, (500, 400), 0, 4)])
    assert syncs.total >= 2 * 4, dict(syncs.counts)  # the counter sees generate()'s waits


def test_a_decode_step_runs_as_many_operators_for_three_rows_as_for_one_and_fewer_without_the_guard(engine):
    """No per-row Python work in the step: the operator count does not grow with the rows. The
    n-gram guard's operators run only while a live row uses it."""
    from bench.dispatch_count import Operators
    from ocr_server.engines.api import NGramSettings

    def operators(pages: list, guard: bool) -> int:
        for page in pages:
            page.ngram = None if guard else NGramSettings(size=0)
        slots = decoder(engine)
        slots.admit(pages)
        slots.step()
        with Operators() as ops:
            slots.step()
        slots.cancel_all()
        while not slots.idle():
            slots.step()
        return ops.total

    one, three = operators(items(engine)[:1], True), operators(items(engine), True)
    assert one == three
    assert operators(items(engine), False) < three


def test_the_runner_keeps_a_decoding_row_streaming_while_a_joining_page_is_prefilled(engine, alone):
    """Through the server's runner: a page joins while a long one decodes; the long row's tokens keep
    coming between the short page's arrival and its first token (its prefill ran in chunks between
    decode steps), and each page gets its alone tokens. The page joins after half the long row's
    tokens: the steps decoded before a prefill began are no debt of that prefill's (they were, and a
    page joining rows that had decoded a while was prefilled whole while they waited)."""
    from ocr_server.runtime.metrics import Metrics
    from ocr_server.engines.transformers.slot_runner import SlotRunner

    async def scenario():
        loop = asyncio.get_running_loop()
        runner = SlotRunner(engine, metrics=Metrics(), on_fatal=lambda exc: None)
        runner.start()
        events: list[str] = []
        long_page, short, _ = items(engine)
        short.max_new_tokens = 4
        joined = asyncio.Event()

        def on_long(tok: int) -> None:  # the engine thread: the long row is decoding
            events.append("long")
            if events.count("long") == NEW // 2:
                loop.call_soon_threadsafe(joined.set)

        long_page.on_token = on_long
        short.on_token = lambda tok: events.append("short")

        async def later():
            await joined.wait()
            events.append("short sent")
            return await runner.submit(short)

        got = await asyncio.gather(runner.submit(long_page), later())
        await runner.stop()
        return got, events

    got, events = asyncio.run(scenario())
    sizes = list(PAGES)
    assert [g.token_ids for g in got] == [alone[sizes[0]], alone[sizes[1]][:4]]
    sent, first = events.index("short sent"), events.index("short")
    assert "long" in events[sent:first], events  # the long row streamed during the short page's prefill


def test_the_server_reports_its_slots_and_concurrency_does_not_cap_them(tiny_native, tmp_path):
    """DECODER=slots behind HTTP: /health names the decoder and its KV per slot; with CONCURRENCY 1
    and QUEUE_SIZE 1, three pages sent at once are all admitted (the three slots are the cap), where
    the generate decoder answers the third 429."""
    import concurrent.futures

    import httpx

    from .conftest import start_server

    server = start_server(tmp_path, {"MODEL_PATH": str(tiny_native), "DECODER": "slots", "DECODE_SLOTS": "3",
                                     "CONCURRENCY": "1", "QUEUE_SIZE": "1", "MAX_NEW_TOKENS": "4", "TIMEOUT_SEC": "120"})
    try:
        health = httpx.get(server.url + "/health").json()
        decoder = health["decoder"]
        assert decoder["decoder"] == "slots" and decoder["slots"] == 3 and decoder["kv_bytes_per_slot"] > 0
        assert decoder["cuda_graphs"] == 0  # a CPU runs the step eagerly
        assert (decoder["decode_step"], decoder["attention"]) == ("eager", "bucket")

        def post(seed: int) -> httpx.Response:
            return httpx.post(server.url + "/v1/ocr", files={"file": ("p.png", samples.png(96, 96, seed=seed), "image/png")},
                              timeout=120)

        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = list(pool.map(post, (41, 42, 43)))
        assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
        assert all(r.json()["usage"]["generated_tokens"] >= 1 for r in answers)
    finally:
        server.stop()
