"""The one file-signature table: what the server and the batch worker take a document to be."""

from __future__ import annotations

import pytest

from ocr_limits import files

SAMPLES = {
    "png": b"\x89PNG\r\n\x1a\n....",
    "jpeg": b"\xff\xd8\xff\xe0....",
    "webp": b"RIFF\x10\x00\x00\x00WEBPVP8 ",
    "tiff": b"II*\x00....",
    "gif": b"GIF89a....",
    "bmp": b"BM....",
    "pdf": b"%PDF-1.7\n",
}


@pytest.mark.parametrize("name, data", sorted(SAMPLES.items()))
def test_each_format_is_known_by_its_first_bytes(name, data):
    assert files.sniff(data) == name


def test_big_endian_tiff_and_gif87_are_known_too():
    assert (files.sniff(b"MM\x00*...."), files.sniff(b"GIF87a..")) == ("tiff", "gif")


def test_a_riff_container_that_is_not_webp_is_no_format():
    assert files.sniff(b"RIFF\x10\x00\x00\x00WAVEfmt ") is None


def test_empty_text_and_unknown_bytes_are_no_format():
    assert [files.sniff(d) for d in (b"", b"hello", b"\x00\x01\x02")] == [None, None, None]


def test_svg_xml_and_html_are_told_apart_as_markup():
    assert all(files.looks_like_markup(d) for d in (b"  <svg xmlns=''>", b"<?xml version='1.0'?>",
                                                    b"<!DOCTYPE html>", b"<html>", b"<x><svg>"))
    assert not files.looks_like_markup(SAMPLES["png"])


def test_every_format_has_a_media_type_and_the_message_names_them_all():
    assert set(files.CONTENT_TYPES) == set(SAMPLES) == set(files.NAMES)
    assert files.CONTENT_TYPES["pdf"] == "application/pdf" and files.CONTENT_TYPES["gif"] == "image/gif"
    assert all(name.lower() in files.SUPPORTED.lower() for name in files.NAMES)


def test_only_pdf_and_tiff_hold_several_pages():
    assert {f.name for f in files.FORMATS if f.multi_page} == {"pdf", "tiff"}
