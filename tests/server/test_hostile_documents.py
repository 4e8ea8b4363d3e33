"""Hostile `pages` options, documents of thousands of pages or levels, and a trickling upload: a
quick, clear 4xx (or a bounded 408) naming the parameter, and the server keeps serving others."""

from __future__ import annotations

import asyncio
import http.client
import threading
import time

import httpx
import pytest

from . import samples
from .conftest import MAIN_ENV, trickle, vm_rss_kib

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


def test_a_pdf_of_ten_thousand_empty_pages_is_refused_quickly_naming_pages(server):
    doc = samples.pdf(10_000)
    with server.client() as c:
        t0 = time.monotonic()
        r = c.post("/v1/ocr", files={"file": ("d.pdf", doc, "application/pdf")})
        elapsed = time.monotonic() - t0
    assert r.status_code == 413 and r.json()["error"]["param"] == "pages", r.text[:300]
    assert "10000 pages" in r.json()["error"]["message"] and elapsed < 3, elapsed


def test_a_pdf_page_tree_ten_thousand_levels_deep_is_a_400_naming_the_file(server):
    with server.client() as c:
        t0 = time.monotonic()
        r = _post_pdf(c, samples.pdf_deep_page_tree(10_000))
        elapsed = time.monotonic() - t0
        assert c.get("/health").status_code == 200
    assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text[:300]
    assert "could not be read" in r.json()["error"]["message"] and elapsed < 3, elapsed


def test_a_pdf_of_objects_nested_a_hundred_thousand_deep_is_read_within_bounds(server):
    """pdfium stops parsing at its own depth limit (64): the page renders without its hostile
    resources, and the process neither overflows its stack nor grows."""
    pid = server.proc.pid
    with server.client() as c:
        # A plain page of the same size first: what the first generation allocates is not the PDF's.
        assert _post_pdf(c, samples.pdf(1)).status_code == 200
        before = vm_rss_kib(pid)
        t0 = time.monotonic()
        r = _post_pdf(c, samples.pdf_deep_objects(100_000))
        elapsed = time.monotonic() - t0
        assert c.get("/health").status_code == 200
    assert r.status_code == 200 and r.json()["layout"]["image_size"] == [400, 300], r.text[:300]
    assert elapsed < 30 and vm_rss_kib(pid) - before < 48 * 1024


def _post_pdf(c: httpx.Client, doc: bytes) -> httpx.Response:
    return c.post("/v1/ocr", files={"file": ("d.pdf", doc, "application/pdf")})


def _post_with_http_client(server, headers: dict[str, str], chunks) -> tuple[int, bytes]:
    """A POST through the standard library's http.client, which sends the whole body before it
    reads an answer (as many clients do): a write that fails ends it before any answer is read."""
    conn = http.client.HTTPConnection(*server.address, timeout=30)
    try:
        conn.putrequest("POST", "/v1/ocr")
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        for chunk in chunks:
            conn.send(chunk)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_a_client_still_sending_a_body_declared_too_large_reads_the_413_it_got_at_once(server):
    """Refused on its Content-Length before a byte of it is read, the body still comes (8 MiB, past
    the 2 MiB limit). The server reads and drops it (a lingering close, up to 16 MiB or 5 s) so the
    client can finish sending and read the 413; closed at once, the connection was reset under the
    client's writes (BrokenPipeError) and the answer never read."""
    size = 8 * 1024 * 1024
    status, body = _post_with_http_client(server, {"Content-Type": "image/png", "Content-Length": str(size)},
                                          (b"0" * (64 * 1024) for _ in range(size // (64 * 1024))))
    assert status == 413 and b'"type":"payload_too_large"' in body, body[:300]


def test_an_upload_at_one_byte_a_second_is_a_408_after_the_body_timeout_while_others_are_served(server):
    """uvicorn bounds no body in time: BODY_TIMEOUT_SEC does (4 s for the test server). The slow
    client gets a 408 and its connection is closed; a normal request meanwhile is served."""
    limit = float(MAIN_ENV["BODY_TIMEOUT_SEC"])
    body = samples.png(64, 48)
    good: list[httpx.Response] = []

    def normal_request() -> None:
        with server.client() as c:
            good.append(c.post("/v1/ocr", files={"file": ("p.png", samples.png(80, 60, seed=3), "image/png")}))

    other = threading.Thread(target=normal_request)
    other.start()
    answer, sent, elapsed = trickle(server, b"POST /v1/ocr HTTP/1.1\r\nHost: t\r\nContent-Type: image/png\r\n"
                                            b"Content-Length: %d\r\n\r\n" % len(body), body, limit + 10)
    other.join(60)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"connection: close" in answer.lower() and b'"type":"body_timeout"' in answer
    assert limit <= elapsed < limit + 5 and sent < len(body), (elapsed, sent)
    assert good and good[0].status_code == 200
