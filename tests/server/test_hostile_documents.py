"""Hostile `pages` options and documents of thousands of pages: a quick, clear 4xx naming the
parameter, and the server keeps serving others meanwhile."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from . import samples

pytestmark = pytest.mark.server


def _post(c: httpx.Client, data: bytes, **fields) -> httpx.Response:
    return c.post("/v1/ocr", files={"file": ("p.png", data, "application/octet-stream")}, data=fields)


def test_a_pages_option_of_thousands_of_ranges_is_refused_naming_it(server):
    with server.client() as c:
        t0 = time.monotonic()
        r = _post(c, samples.png(64, 64), pages="1-10001," * 200 + "1")
        elapsed = time.monotonic() - t0
    assert r.status_code == 413, r.text[:300]
    err = r.json()["error"]
    assert err["type"] == "payload_too_large" and err["param"] == "pages"
    assert len(r.content) < 1000 and elapsed < 2


def test_a_pages_option_selecting_more_pages_than_allowed_is_refused_by_count(server):
    with server.client() as c:
        r = _post(c, samples.png(64, 64), pages="1-10001")
    assert r.status_code == 413 and r.json()["error"]["param"] == "pages", r.text[:300]
    assert len(r.content) < 1000


def test_tiffs_of_twenty_thousand_pages_are_refused_quickly_while_a_normal_request_is_served(server):
    """Two hostile TIFFs (2 MB, 20,000 empty pages each) fill both preprocessing workers if their
    pages are walked; they are refused after walking MAX_PAGES + 1, and a normal page is served."""
    hostile = samples.tiff_frames(20_000)

    async def scenario():
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as c:
            async def timed(data: bytes) -> tuple[httpx.Response, float]:
                t0 = time.monotonic()
                r = await c.post("/v1/ocr", files={"file": ("p.tif", data, "image/tiff")})
                return r, time.monotonic() - t0

            bad = [asyncio.ensure_future(timed(hostile)) for _ in range(2)]
            await asyncio.sleep(0.05)
            good = await timed(samples.png(120, 90, seed=77))
            return [await b for b in bad], good

    bad, (good, good_s) = asyncio.run(scenario())
    for r, seconds in bad:
        assert r.status_code == 413 and r.json()["error"]["param"] == "pages", r.text[:300]
        assert seconds < 2, f"refused after {seconds:.1f}s"
    assert good.status_code == 200 and good_s < 5, (good.status_code, good_s)
