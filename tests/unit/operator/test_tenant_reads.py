"""Reads of endpoints the operator does not control are bounded (runtime.bounded): the quality
gate's page answers and fetched pages, read up to a limit and read whole when under it (a body
arriving in several pieces included); the tenant-call pool runs one call per tenant and gives up
waiting at its deadline. The servers are aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import pytest
from aiohttp import web

from ocr_operator.ocrservice import gaterun
from ocr_operator.runtime.bounded import Busy, TenantCalls, TooLarge, read_limited


async def serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


async def huge_answer(request: web.Request) -> web.StreamResponse:
    """200 with a JSON text of 32 MiB, sent in pieces (chunked)."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    try:
        await resp.write(b'{"text": "')
        for _ in range(512):
            await resp.write(b"x" * 65536)
        await resp.write(b'", "usage": {"generated_tokens": 1}}')
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        pass
    return resp


async def pieces(request: web.Request) -> web.StreamResponse:
    """200 with a small JSON answer in three pieces, a pause between them."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    for part in (b'{"text": "hel', b'lo", "usage": ', b'{"generated_tokens": 2}}'):
        await resp.write(part)
        await asyncio.sleep(0.05)
    return resp


def test_a_pods_page_answer_over_the_bound_is_refused_not_read_whole(monkeypatch):
    monkeypatch.setattr(gaterun, "MAX_ANSWER_BYTES", 1024 * 1024)

    async def go():
        runner, base = await serve(huge_answer)
        try:
            async with aiohttp.ClientSession() as session:
                with pytest.raises(RuntimeError, match="longer than 1048576 bytes"):
                    await gaterun._page(session, f"{base}/v1/ocr", {"image": ""}, time.monotonic() + 10)
        finally:
            await runner.cleanup()

    asyncio.run(go())


def test_an_answer_in_pieces_is_read_whole():
    async def go():
        runner, base = await serve(pieces)
        try:
            async with aiohttp.ClientSession() as session:
                return await gaterun._page(session, f"{base}/v1/ocr", {"image": ""}, time.monotonic() + 10)
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == ("hello", 2, None)  # no pages, no outcome


def test_read_limited_stops_at_the_limit():
    async def go():
        runner, base = await serve(huge_answer)
        try:
            async with aiohttp.ClientSession() as session, session.get(base) as resp:
                with pytest.raises(TooLarge):
                    await read_limited(resp.content, 100_000)
                return resp.content.total_bytes
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) < 8 * 1024 * 1024  # what arrived before it stopped, not the 32 MiB


def test_the_pool_runs_one_call_per_tenant_and_stops_waiting_at_the_deadline():
    pool = TenantCalls(threads=2)
    release = threading.Event()

    async def go():
        started = time.monotonic()
        with pytest.raises(asyncio.TimeoutError, match="listing a: no answer within 0.2 s"):
            await pool.run(release.wait, timeout=0.2, tenant="a", what="listing a")
        waited = time.monotonic() - started
        with pytest.raises(Busy, match="same tenant"):
            await pool.run(lambda: 1, tenant="a")
        assert await pool.run(lambda: 2, tenant="b", timeout=1) == 2  # another tenant is served at once
        with pytest.raises(asyncio.TimeoutError):
            await pool.run(release.wait, timeout=0.1, tenant="c")
        with pytest.raises(Busy, match="every thread"):  # a and c hold both threads past their deadlines
            await pool.run(lambda: 3, tenant="d")
        release.set()
        for _ in range(100):
            if pool.in_flight() == 0:
                break
            await asyncio.sleep(0.01)
        assert await pool.run(lambda: 4, tenant="a") == 4
        return waited

    assert asyncio.run(go()) < 1.0


PAGE = bytes(range(256)) * 64  # 16 KiB


async def page_in_pieces(request: web.Request) -> web.StreamResponse:
    """A golden page's bytes in four pieces, a pause between them (a pod's GET /v1/golden/<name>)."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "application/octet-stream"})
    await resp.prepare(request)
    for i in range(4):
        await resp.write(PAGE[i * 4096:(i + 1) * 4096])
        await asyncio.sleep(0.05)
    return resp


def test_a_golden_page_fetched_in_pieces_is_read_whole():
    import hashlib

    from ocr_operator.ocrservice.rollout.pages import Page

    async def go():
        runner, base = await serve(page_in_pieces)
        try:
            async with aiohttp.ClientSession() as session:
                page = Page("p.png", b"", sha256=hashlib.sha256(PAGE).hexdigest())
                return await gaterun._fetch(session, f"{base}/v1/golden/p.png", page, time.monotonic() + 10)
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == PAGE  # before: one read, the first piece, "its bytes changed"
