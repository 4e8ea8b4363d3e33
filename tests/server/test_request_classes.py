"""X-Request-Class over HTTP: interactive requests are started first, batch requests shed first.

One real server (the default slots decoder) with the tiny model, one engine slot (CONCURRENCY 1,
BATCH_SIZE 1), QUEUE_SIZE 4 and BATCH_QUEUE_THRESHOLD 2. Admission is the same code for every
decoder and engine; the generate batcher's page order is in tests/unit/server/test_request_classes.py. A streamed request with a
long forced budget holds the slot until the test closes its connection, so the queue is built
while nothing can start, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time

import httpx
import pytest

from . import samples
from .conftest import start_server

pytestmark = pytest.mark.server

HOLD_TOKENS = 4000  # far more than the queue takes to build: the holder ends when the test closes it


@pytest.fixture(scope="module")
def one_slot(tiny_native, tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("classes"), {
        "MODEL_PATH": str(tiny_native), "CONCURRENCY": "1", "BATCH_SIZE": "1",
        "BATCH_WAIT_MS": "0", "QUEUE_SIZE": "4", "BATCH_QUEUE_THRESHOLD": "2", "MAX_NEW_TOKENS": str(HOLD_TOKENS),
        "TIMEOUT_SEC": "120", "CACHE_ENTRIES": "0",
    })
    yield server
    server.stop()


def metric(text: str, name: str, labels: str) -> float:
    m = re.search(rf"^{re.escape(name)}{{{re.escape(labels)}}} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def page(seed: int) -> dict:
    return {"file": ("p.png", samples.png(96, 64, seed=seed), "image/png")}


async def until_queued(c: httpx.AsyncClient, cls: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while metric((await c.get("/metrics")).text, "ocr_queued_requests", f'class="{cls}"') != count:
        assert time.monotonic() < deadline, f"never {count} {cls} requests queued"
        await asyncio.sleep(0.05)


def test_a_queued_interactive_request_starts_before_earlier_batch_ones_and_batch_is_shed_first(one_slot):
    done: dict[str, float] = {}

    async def scenario() -> tuple[list[httpx.Response], httpx.Response]:
        async with httpx.AsyncClient(base_url=one_slot.url, timeout=120) as c:
            async def ocr(name: str, cls: str) -> httpx.Response:
                r = await c.post("/v1/ocr", files=page(len(name)), data={"max_new_tokens": "2"},
                                 headers={"X-Request-Class": cls})
                done[name] = time.monotonic()
                return r

            hold = {"stream": "true", "max_new_tokens": str(HOLD_TOKENS), "min_new_tokens": str(HOLD_TOKENS)}
            async with c.stream("POST", "/v1/ocr", files=page(0), data=hold, headers={"X-Request-Class": "batch"}) as r:
                assert r.status_code == 200  # headers come once it is admitted: it holds the one slot
                queued = [asyncio.create_task(ocr("b1", "batch"))]
                await until_queued(c, "batch", 1)
                queued.append(asyncio.create_task(ocr("b2", "batch")))
                await until_queued(c, "batch", 2)
                shed = await c.post("/v1/ocr", files=page(9), headers={"X-Request-Class": "batch"})
                queued.append(asyncio.create_task(ocr("i1", "interactive")))
                await until_queued(c, "interactive", 1)
            # the holder's connection is closed: its row is cancelled and the slot freed
            return await asyncio.gather(*queued), shed

    before = httpx.get(one_slot.url + "/metrics").text
    answers, shed = asyncio.run(scenario())
    after = httpx.get(one_slot.url + "/metrics").text
    assert [r.status_code for r in answers] == [200, 200, 200], [r.text for r in answers]
    assert done["i1"] < done["b1"] < done["b2"], done
    assert shed.status_code == 429 and int(shed.headers["retry-after"]) >= 1
    assert shed.json()["error"]["type"] == "queue_full" and "BATCH_QUEUE_THRESHOLD=2" in shed.json()["error"]["message"]

    def moved(name: str, labels: str) -> float:
        return metric(after, name, labels) - metric(before, name, labels)

    assert moved("ocr_requests_shed_total", 'class="batch"') == 1
    assert moved("ocr_requests_shed_total", 'class="interactive"') == 0
    assert moved("ocr_requests_total", 'class="batch",endpoint="/v1/ocr",status="429"') == 1
    assert moved("ocr_requests_total", 'class="batch",endpoint="/v1/ocr",status="200"') == 2
    assert moved("ocr_requests_total", 'class="interactive",endpoint="/v1/ocr",status="200"') == 1
    assert moved("ocr_queue_wait_seconds_count", 'class="interactive"') == 1
    assert moved("ocr_queue_wait_seconds_count", 'class="batch"') == 3  # the holder and b1, b2


def test_the_chat_api_reads_the_class_and_both_apis_refuse_an_unknown_one_naming_the_header(one_slot):
    url = "data:image/png;base64," + base64.b64encode(samples.png(96, 64, seed=7)).decode()
    chat = {"model": "deepseek-ai/DeepSeek-OCR-2", "max_tokens": 2, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "<image>\nFree OCR."}]}]}
    with one_slot.client() as c:
        before = c.get("/metrics").text
        ok = c.post("/v1/chat/completions", json=chat, headers={"X-Request-Class": "batch"})
        after = c.get("/metrics").text
        bad = [c.post("/v1/ocr", files=page(1), headers={"X-Request-Class": "urgent"}),
               c.post("/v1/chat/completions", json=chat, headers={"X-Request-Class": "urgent"})]
    counted = 'class="batch",endpoint="/v1/chat/completions",status="200"'
    assert ok.status_code == 200, ok.text
    assert metric(after, "ocr_requests_total", counted) == metric(before, "ocr_requests_total", counted) + 1
    for r in bad:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "X-Request-Class" and "'urgent' is not a request class" in error["message"]


@pytest.fixture(scope="module")
def two_slots(tiny_native, tmp_path_factory):
    """Two slots (the slots decoder's BATCH_SIZE 2), of which batch may hold one (the default
    BATCH_MAX_RUNNING: 2 - 1)."""
    server = start_server(tmp_path_factory.mktemp("kept-slot"), {
        "MODEL_PATH": str(tiny_native), "CONCURRENCY": "2", "BATCH_SIZE": "2", "QUEUE_SIZE": "4",
        "MAX_NEW_TOKENS": str(HOLD_TOKENS), "TIMEOUT_SEC": "120", "CACHE_ENTRIES": "0",
    })
    yield server
    server.stop()


HOLD = {"stream": "true", "max_new_tokens": str(HOLD_TOKENS), "min_new_tokens": str(HOLD_TOKENS)}


def test_batch_requests_leave_a_slot_to_interactive_ones_which_start_at_once_during_a_batch(two_slots):
    async def scenario() -> tuple[httpx.Response, bool, float]:
        async with httpx.AsyncClient(base_url=two_slots.url, timeout=120) as c:
            async with c.stream("POST", "/v1/ocr", files=page(0), data=HOLD, headers={"X-Request-Class": "batch"}) as r:
                assert r.status_code == 200  # the batch holder runs in batch's one slot
                waiting = asyncio.create_task(c.post("/v1/ocr", files=page(1), data={"max_new_tokens": "2"},
                                                     headers={"X-Request-Class": "batch"}))
                await until_queued(c, "batch", 1)  # waits, though the other slot is free
                interactive = await c.post("/v1/ocr", files=page(2), data={"max_new_tokens": "2"})
                still_waiting = not waiting.done() and metric(
                    (await c.get("/metrics")).text, "ocr_queued_requests", 'class="batch"') == 1
            batch = await waiting  # the holder's connection closed: the waiting batch request runs
            return interactive, still_waiting, batch.status_code

    interactive, still_waiting, batch_status = asyncio.run(scenario())
    assert interactive.status_code == 200, interactive.text
    assert interactive.json()["timings"]["queue_ms"] < 1000  # admitted at once, not after the holder
    assert still_waiting and batch_status == 200


def test_while_an_interactive_request_is_inside_a_batch_page_is_held_back_two_seconds_at_most(two_slots):
    async def scenario() -> tuple[httpx.Response, bool]:
        async with httpx.AsyncClient(base_url=two_slots.url, timeout=120) as c:
            async with c.stream("POST", "/v1/ocr", files=page(3), data=HOLD) as r:
                assert r.status_code == 200  # an interactive request decoding its long budget
                batch = await c.post("/v1/ocr", files=page(4), data={"max_new_tokens": "2"},
                                     headers={"X-Request-Class": "batch"})
                async for _ in r.aiter_bytes():  # the holder is still decoding when the batch page ended
                    return batch, True
        return batch, False

    batch, holder_still_running = asyncio.run(scenario())
    assert batch.status_code == 200, batch.text
    timings = batch.json()["timings"]
    # admitted at once (a free slot, under batch's cap), then held in the decoder's inbox
    assert timings["queue_ms"] < 1000 and timings["generate_ms"] >= 2000, timings
    assert holder_still_running
