"""Batching, deadlines and overload."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

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
