"""Batching, deadlines and overload."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.zygote import Forked, enabled as forking_enabled

from . import samples
from .conftest import start_server

pytestmark = pytest.mark.server


def _batch_hist(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^ocr_batch_size_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)}


async def _post_many(url: str, bodies: list[bytes], **data) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=300) as c:
        return await asyncio.gather(*(c.post("/v1/ocr", files={"file": ("p.png", b, "image/png")}, data=data) for b in bodies))


def test_sixteen_simultaneous_requests_succeed_and_are_batched(server):
    before = httpx.get(server.url + "/metrics").text
    bodies = [samples.png(200 + 10 * i, 150, seed=100 + i) for i in range(16)]
    responses = asyncio.run(_post_many(server.url, bodies))
    assert [r.status_code for r in responses] == [200] * 16, [r.text for r in responses if r.status_code != 200]
    after = httpx.get(server.url + "/metrics").text
    b, a = _batch_hist(before), _batch_hist(after)
    steps = a["+Inf"] - b["+Inf"]  # ocr_batch_size: rows per decode step
    single = a["1.0"] - b["1.0"]
    # the pages shared decode steps: at least one step decoded several of them
    assert steps - single >= 1, f"batch histogram delta: {steps} decode steps, {single} with one page"


def _engine_series(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    wanted = ("ocr_prefill_pages_count", "ocr_prefill_pages_sum", "ocr_batch_size_count", "ocr_engine_busy_seconds_total")
    return {s.name + "".join(f"/{v}" for v in s.labels.values()): s.value
            for f in text_string_to_metric_families(text) for s in f.samples if s.name in wanted}


def test_the_pages_of_one_document_join_in_one_prefill_and_the_engine_reports_its_busy_time(server):
    before = _engine_series(server.url)
    t0 = time.monotonic()
    with server.client() as c:  # three pages of sizes no other test sends: no cache hit
        r = c.post("/v1/ocr", files={"file": ("doc.pdf", samples.pdf_of_sizes([(210, 150), (220, 150), (230, 150)]),
                                              "application/pdf")})
    wall = time.monotonic() - t0
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["pages"] == 3
    after = _engine_series(server.url)
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    assert (d["ocr_prefill_pages_count"], d["ocr_prefill_pages_sum"]) == (1, 3), d  # the three together, once
    prefill, decode = d["ocr_engine_busy_seconds_total/prefill"], d["ocr_engine_busy_seconds_total/decode"]
    assert prefill > 0 and decode > 0 and d["ocr_batch_size_count"] >= 1, d
    assert prefill + decode <= wall, (d, wall)  # one engine thread: its busy time fits in the request's


def test_request_with_a_tiny_deadline_gets_504(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(1500, 1500, seed=5), "image/png")},
                   data={"timeout_sec": "0.05"})
        assert r.status_code == 504, r.text
        assert r.json()["error"]["type"] == "deadline_exceeded"
        assert c.get("/health").status_code == 200


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """Stand-in engine (generate sleeps 1.5 s): needed to control timing exactly; not a model."""
    server = start_server(tmp_path_factory.mktemp("stand-in"), {
        "CONCURRENCY": "1", "QUEUE_SIZE": "1", "BATCH_SIZE": "4", "BATCH_WAIT_MS": "0",
        "STAND_IN_GENERATE_SEC": "1.5", "TIMEOUT_SEC": "30",
    }, module="ocr_server_testing.stand_in", timeout=60)
    yield server
    server.stop()


def test_the_stand_in_is_forked_from_the_servers_zygote(stand_in):
    """Its imports are the server's: a fork, not a fresh process importing torch and transformers."""
    assert isinstance(stand_in.proc, Forked) or not forking_enabled()


def test_overload_answers_429_with_retry_after(stand_in):
    """Stand-in engine: 1 running + 1 waiting fill the server; the rest must get 429 at once."""
    responses = asyncio.run(_post_many(stand_in.url, [samples.png(64, 64, seed=i) for i in range(5)]))
    codes = sorted(r.status_code for r in responses)
    assert codes.count(200) == 2 and codes.count(429) == 3, codes
    rejected = [r for r in responses if r.status_code == 429]
    assert all(int(r.headers["retry-after"]) >= 1 for r in rejected)
    assert rejected[0].json()["error"]["type"] == "queue_full"


def test_expired_request_is_dropped_without_generating(stand_in):
    """Stand-in engine: a request whose deadline passes while it waits never reaches generate."""
    stats0 = httpx.get(stand_in.url + "/stand-in/stats").json()

    async def scenario():
        async with httpx.AsyncClient(base_url=stand_in.url, timeout=60) as c:
            slow = asyncio.create_task(c.post("/v1/ocr", files={"file": ("a.png", samples.png(64, 64, seed=50), "image/png")}))
            await asyncio.sleep(0.3)
            late = await c.post("/v1/ocr", files={"file": ("b.png", samples.png(64, 64, seed=51), "image/png")},
                                data={"timeout_sec": "0.5"})
            return await slow, late

    slow, late = asyncio.run(scenario())
    assert slow.status_code == 200 and late.status_code == 504
    stats1 = httpx.get(stand_in.url + "/stand-in/stats").json()
    assert stats1["pages_generated"] - stats0["pages_generated"] == 1
