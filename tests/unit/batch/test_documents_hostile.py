"""Documents built to hurt a reader (ocr_batch_worker.documents, tiff): each one's failure is
that document's, or that page's or line's, with a reason; none escapes as an exception of the
worker. Real files: Pillow, pypdfium2 and json meet them as they would a user's."""

from __future__ import annotations

import io
import json
import sys

import pytest
from PIL import Image

from ocr_batch_worker.documents import CHAT, OCR, Part, body_refusal, custom_id_of, split
from ocr_batch_worker.failures import DocumentError
from ocr_limits.files import MAX_PAGE_PIXELS

from .corpus import BOMB_REFUSAL, chat_line, deep_line, image, png_header_only, tiff_header_only


def test_a_jsonl_line_nested_1100_deep_is_an_error_of_that_line_keeping_its_custom_id():
    text = "\n".join([chat_line("good"), deep_line("deep-one"), chat_line("after")])
    doc = split("in.jsonl", text.encode(), max_pages=10)
    assert [p.custom_id for p in doc.parts] == ["good", "after"]
    assert dict(doc.errors) == {2: "line 2 is nested more than 64 deep"}
    assert doc.error_ids == {2: "deep-one"}


def test_a_bad_line_that_is_a_request_keeps_its_custom_id_and_one_that_is_not_json_has_none():
    text = "\n".join([chat_line("a", url="/v1/embeddings"), "{not json", chat_line("b", body={"stream": True})])
    doc = split("in.jsonl", text.encode(), max_pages=10)
    assert sorted(dict(doc.errors)) == [1, 2, 3]
    assert doc.error_ids == {1: "a", 3: "b"}


def test_a_line_nested_deeper_than_the_bound_is_refused_whatever_the_interpreters_recursion_limit():
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # as a library loaded beside the worker may set it
    try:
        doc = split("in.jsonl", deep_line("deep", depth=100).encode(), max_pages=10)
    finally:
        sys.setrecursionlimit(limit)
    assert dict(doc.errors) == {1: "line 1 is nested more than 64 deep"} and doc.error_ids == {1: "deep"}


def test_brackets_inside_strings_do_not_count_as_nesting():
    line = chat_line("ok", body={"model": "m", "messages": [{"role": "user", "content": "[" * 500 + "{" * 500}]})
    assert [p.custom_id for p in split("in.jsonl", line.encode(), max_pages=10).parts] == ["ok"]


def test_a_custom_id_is_read_from_a_line_json_cannot_read_with_its_escapes():
    assert custom_id_of('{"custom_id": "q\\"1\\n", "body": [[[') == 'q"1\n'
    assert custom_id_of('{"body": 1}') is None


def test_a_tiff_whose_header_declares_over_179_mpx_is_an_error_of_the_document_not_an_exception():
    data = tiff_header_only(20_000, 10_000)  # 200 Mpx: Pillow's DecompressionBombError at open
    with pytest.raises(DocumentError, match=f"the TIFF ({BOMB_REFUSAL})|page 1 of the TIFF is 20000x10000"):
        split("bomb.tif", data, max_pages=10)


def test_a_one_page_tiff_larger_than_the_server_reads_is_refused_from_its_header():
    with pytest.raises(DocumentError, match=f"page 1 of the TIFF is 10000x8000 = 80000000 pixels; the OcrService "
                                            f"reads at most {MAX_PAGE_PIXELS}"):
        split("big.tif", tiff_header_only(10_000, 8_000), max_pages=10)


def test_a_png_whose_header_declares_a_bomb_is_refused_before_it_is_sent():
    with pytest.raises(DocumentError, match=f"the PNG ({BOMB_REFUSAL})|the PNG is 20000x10000"):
        split("bomb.png", png_header_only(20_000, 10_000), max_pages=1)
    with pytest.raises(DocumentError, match="the PNG is 9000x8000 = 72000000 pixels"):
        split("big.png", png_header_only(9_000, 8_000), max_pages=1)


def test_a_damaged_page_of_a_tiff_fails_alone_when_it_is_cut_out():
    data = bytearray(image("TIFF", size=(64, 64), frames=2))
    doc = split("a.tif", bytes(data), max_pages=10)
    first = doc.body(doc.parts[0])
    doc.close()
    # The second page's strip offset points past the end of the file.
    img = Image.open(io.BytesIO(bytes(data)))
    img.seek(1)
    offset = img.tag_v2[273][0]
    img.close()
    broken = bytes(data[:offset]) + b"\0" * 4  # the second page's pixels cut off
    doc = split("a.tif", broken, max_pages=10)
    with pytest.raises(DocumentError, match="page 2 of the TIFF could not be read"):
        doc.body(doc.parts[1])
    assert doc.body(doc.parts[0]) == first
    doc.close()


def test_a_page_over_the_servers_body_limit_is_refused_with_its_size_and_the_limit():
    page = Part(3, b"", "application/pdf")
    assert body_refusal(page, 20 * 1024 * 1024, 20 * 1024 * 1024) is None
    assert body_refusal(page, 20 * 1024 * 1024 + 1, 20 * 1024 * 1024) == (
        "page 3 is 20971521 bytes; the OcrService takes at most 20971520 bytes per request (its body limit)")
    line = Part(2, b"", "application/json", endpoint=CHAT)
    assert body_refusal(line, 25 * 1024 * 1024, 20 * 1024 * 1024) is None  # JSON: base64 grows by 4/3
    assert body_refusal(line, 30 * 1024 * 1024, 20 * 1024 * 1024).startswith("line 2 is")
    assert OCR != CHAT


def test_a_one_bit_scan_page_is_cut_out_losslessly():
    img1 = Image.new("1", (200, 100), 1)
    img1.putpixel((5, 7), 0)
    img2 = Image.new("1", (200, 100), 0)
    buf = io.BytesIO()
    img1.save(buf, "TIFF", save_all=True, append_images=[img2], compression="group4")
    doc = split("fax.tif", buf.getvalue(), max_pages=10)
    with Image.open(io.BytesIO(doc.body(doc.parts[0]))) as one:
        assert one.mode == "1" and one.getpixel((5, 7)) == 0 and one.getpixel((6, 7)) == 255
    doc.close()


def test_the_custom_ids_of_good_lines_are_not_in_error_ids():
    doc = split("in.jsonl", (chat_line("x") + "\n").encode(), max_pages=10)
    assert doc.error_ids == {} and json.loads(doc.parts[0].body)["model"] == "m"


def test_a_tiff_page_is_turned_upright_by_its_own_orientation_tag_and_the_others_are_not():
    from PIL import TiffImagePlugin

    buf = io.BytesIO()
    with TiffImagePlugin.AppendingTiffWriter(buf, True) as tf:
        Image.new("RGB", (40, 20), (255, 0, 0)).save(tf, "TIFF")
        tf.newFrame()
        turned = TiffImagePlugin.ImageFileDirectory_v2()
        turned[274] = 6  # Orientation: rotate 90 degrees clockwise to view
        Image.new("RGB", (40, 20), (0, 255, 0)).save(tf, "TIFF", tiffinfo=turned)
        tf.newFrame()
    doc = split("scan.tif", buf.getvalue(), max_pages=10)
    sizes = [Image.open(io.BytesIO(doc.body(p))).size for p in doc.parts]
    doc.close()
    assert sizes == [(40, 20), (20, 40)]
