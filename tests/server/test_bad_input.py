"""Bad input gets a clear JSON 4xx, never a 500, and the server stays healthy afterwards."""

from __future__ import annotations

import base64

import pytest

from . import samples

pytestmark = pytest.mark.server

GOOD = samples.png(200, 200)


def _multipart(name, data, ctype="application/octet-stream", **fields):
    return {"files": {"file": (name, data, ctype)}, "data": fields}


CASES = [
    ("not an image", _multipart("a.png", b"hello, this is plain text", "image/png"), 415, "unsupported_media_type"),
    ("truncated png", _multipart("t.png", samples.png(400, 300)[:300]), 400, "invalid_input"),
    ("truncated jpeg", _multipart("t.jpg", samples.encode(samples.page(400, 300), "JPEG")[:400]), 400, "invalid_input"),
    ("zero-byte body", _multipart("z.png", b""), 400, "invalid_input"),
    ("decompression bomb", _multipart("bomb.png", samples.png_bomb()), 413, "payload_too_large"),
    ("oversized body", _multipart("big.bin", b"\x89PNG\r\n\x1a\n" + b"0" * (3 * 1024 * 1024)), 413, "payload_too_large"),
    ("svg", _multipart("x.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><text>hi</text></svg>', "image/svg+xml"), 415, "unsupported_media_type"),
    ("html", _multipart("x.html", b"<!DOCTYPE html><html><body>hi</body></html>", "image/png"), 415, "unsupported_media_type"),
    ("wrong content type", {"content": GOOD, "headers": {"content-type": "text/plain"}}, 415, "unsupported_media_type"),
    ("bad base64", {"json": {"image": "not base64 !!"}}, 400, "invalid_input"),
    ("unknown json option", {"json": {"image": base64.b64encode(GOOD).decode(), "temperature": 0.7}}, 422, "invalid_options"),
    ("unknown form option", _multipart("p.png", GOOD, "image/png", colour="red"), 422, "invalid_options"),
    ("bad option value", _multipart("p.png", GOOD, "image/png", prompt_mode="poem"), 422, "invalid_options"),
    ("visual tokens out of range", _multipart("p.png", GOOD, "image/png", max_visual_tokens="5000"), 422, "invalid_options"),
    ("pdf over the page limit", _multipart("d.pdf", samples.pdf(5), "application/pdf"), 413, "payload_too_large"),
    ("page that does not exist", _multipart("p.png", GOOD, "image/png", pages="4"), 400, "invalid_input"),
    ("json that is not an object", {"json": [1, 2]}, 400, "invalid_input"),
    ("multipart without file", {"files": {"other": ("a", b"x")}}, 400, "invalid_input"),
]


@pytest.mark.parametrize("case,request_kw,status,etype", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_json_4xx(server, case, request_kw, status, etype):
    with server.client() as c:
        assert_clear_json_4xx(c, case, request_kw, status, etype)
    assert server.proc.poll() is None


def assert_clear_json_4xx(c, case: str, request_kw: dict, status: int, etype: str) -> None:
    """POST the bad input: the expected status with a JSON error naming it, no traceback, still healthy."""
    r = c.post("/v1/ocr", **request_kw)
    assert r.status_code == status, f"{case}: {r.status_code} {r.text}"
    err = r.json()["error"]
    assert err["type"] == etype and err["code"] == status and err["message"]
    assert "Traceback" not in r.text
    assert c.get("/health").status_code == 200


def test_server_still_serves_after_all_bad_input(server):
    with server.client() as c:
        for _, kw, _, _ in CASES:
            c.post("/v1/ocr", **kw)
        r = c.post("/v1/ocr", files={"file": ("ok.png", samples.png(100, 80, seed=99), "image/png")})
        metrics = c.get("/metrics").text
    assert r.status_code == 200
    assert 'status="500"' not in metrics
