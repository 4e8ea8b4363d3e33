"""GET /v1/golden and /v1/golden/{name}: the quality gate's golden pages on the model volume
(GOLDEN_DIR), listed and served read-only within the gate's bounds, over HTTP to a real server."""

from __future__ import annotations

import hashlib
import os
import shutil

import pytest

from ocr_limits.quality import MAX_GOLDEN_BYTES, MAX_GOLDEN_PAGES, MAX_PAGE_TEXT_CHARS

from .conftest import start_server


@pytest.fixture(scope="module")
def golden_server(tiny_native, tmp_path_factory):
    """A server whose GOLDEN_DIR is a folder the tests fill: it is read on every request."""
    root = tmp_path_factory.mktemp("golden-volume")
    folder = root / "golden"
    folder.mkdir()
    server = start_server(tmp_path_factory.mktemp("golden-server"),
                          {"MODEL_PATH": str(tiny_native), "GOLDEN_DIR": str(folder)})
    yield server, folder
    server.stop()


@pytest.fixture
def golden(golden_server):
    """The server and its golden folder, emptied before each test."""
    server, folder = golden_server
    for entry in folder.iterdir():
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    return server, folder


def test_listing_names_each_page_with_size_sha256_and_expected_text(golden):
    server, folder = golden
    (folder / "a.png").write_bytes(b"page-a")
    (folder / "a.png.txt").write_text("Text of A")
    (folder / "b.png").write_bytes(b"page-bb")
    (folder / ".hidden").write_bytes(b"x")
    (folder / "sub").mkdir()
    with server.client() as c:
        r = c.get("/v1/golden")
    assert r.status_code == 200, r.text
    assert r.json() == {"totalBytes": 13, "pages": [
        {"name": "a.png", "size": 6, "sha256": hashlib.sha256(b"page-a").hexdigest(), "expected": "Text of A"},
        {"name": "b.png", "size": 7, "sha256": hashlib.sha256(b"page-bb").hexdigest(), "expected": None}]}


def test_a_page_is_served_as_its_bytes(golden):
    server, folder = golden
    (folder / "a.png").write_bytes(b"\x89PNG-bytes")
    with server.client() as c:
        r = c.get("/v1/golden/a.png")
    assert r.status_code == 200
    assert r.content == b"\x89PNG-bytes"
    assert r.headers["x-content-sha256"] == hashlib.sha256(b"\x89PNG-bytes").hexdigest()


@pytest.mark.parametrize("name", ["..%2Fsecret", "%2E%2E", ".hidden", "a.png.txt", "nope.png"])
def test_names_outside_the_pages_are_404_and_never_read(golden, name):
    server, folder = golden
    (folder / "a.png").write_bytes(b"page")
    (folder / "a.png.txt").write_text("text")
    (folder / ".hidden").write_bytes(b"hidden-bytes")
    (folder.parent / "secret").write_bytes(b"secret-bytes")
    with server.client() as c:
        r = c.get(f"/v1/golden/{name}")
    assert r.status_code == 404, r.text
    assert b"secret-bytes" not in r.content and b"hidden-bytes" not in r.content
    if "%" not in name:  # an encoded slash or dots never reach the route at all
        assert r.json()["error"]["type"] == "not_found"


def test_a_symbolic_link_out_of_the_folder_is_refused(golden):
    server, folder = golden
    (folder.parent / "outside.png").write_bytes(b"outside")
    (folder / "a.png").symlink_to(folder.parent / "outside.png")
    with server.client() as c:
        listed, page = c.get("/v1/golden"), c.get("/v1/golden/a.png")
    for r in (listed, page):
        assert r.status_code == 422, r.text
        assert r.json()["error"]["type"] == "golden_pages_invalid"
        assert "symbolic link" in r.json()["error"]["message"]
        assert b"outside" not in r.content.replace(b"outside.png", b"")


def test_more_pages_than_the_limit_is_413(golden):
    server, folder = golden
    for i in range(MAX_GOLDEN_PAGES + 1):
        (folder / f"p{i:02d}.png").write_bytes(b"x")
    with server.client() as c:
        r = c.get("/v1/golden")
    assert r.status_code == 413
    assert r.json()["error"]["type"] == "golden_pages_too_large"
    assert f"more than {MAX_GOLDEN_PAGES}" in r.json()["error"]["message"]


def test_more_bytes_than_the_limit_is_413(golden):
    server, folder = golden
    (folder / "big.png").write_bytes(b"x" * (MAX_GOLDEN_BYTES + 1))
    with server.client() as c:
        r = c.get("/v1/golden/big.png")
    assert r.status_code == 413
    assert f"more than {MAX_GOLDEN_BYTES} bytes" in r.json()["error"]["message"]


def test_an_expected_text_without_its_page_is_422(golden):
    server, folder = golden
    (folder / "a.png").write_bytes(b"page")
    (folder / "b.png.txt").write_text("orphan")
    with server.client() as c:
        r = c.get("/v1/golden")
    assert r.status_code == 422
    assert "b.png.txt names no page" in r.json()["error"]["message"]


def test_a_missing_folder_is_404_golden_pages_missing(golden):
    server, folder = golden
    moved = folder.with_name("golden-moved")
    os.rename(folder, moved)
    try:
        with server.client() as c:
            r = c.get("/v1/golden")
    finally:
        os.rename(moved, folder)
    assert r.status_code == 404
    assert r.json()["error"]["type"] == "golden_pages_missing"
    assert "no such folder" in r.json()["error"]["message"]


def test_without_golden_dir_the_endpoint_is_404(server):
    with server.client() as c:
        r = c.get("/v1/golden")
    assert r.status_code == 404
    assert r.json()["error"] == {"message": "GOLDEN_DIR is not set: this server has no golden pages",
                                 "type": "golden_pages_missing", "code": 404, "param": None}


def test_an_expected_text_longer_than_the_limit_is_413(golden):
    server, folder = golden
    (folder / "a.png").write_bytes(b"page")
    (folder / "a.png.txt").write_text("é" * (MAX_PAGE_TEXT_CHARS + 1))
    with server.client() as c:
        r = c.get("/v1/golden")
    assert r.status_code == 413
    assert f"a.png.txt is longer than {MAX_PAGE_TEXT_CHARS} characters" in r.json()["error"]["message"]
