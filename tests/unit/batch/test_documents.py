"""What a document is and the requests it becomes (ocr_batch_worker.documents)."""

import io
import json

import pypdfium2 as pdfium
import pytest
from PIL import Image

from ocr_batch_worker.documents import CHAT, DocumentError, kind_of, split
from tests.server import samples




def image(fmt: str, frames: int = 1) -> bytes:
    imgs = [Image.new("RGB", (40, 30), (i * 40, 0, 0)) for i in range(frames)]
    buf = io.BytesIO()
    imgs[0].save(buf, fmt, save_all=frames > 1, append_images=imgs[1:])
    return buf.getvalue()


@pytest.mark.parametrize("fmt, kind", [("PNG", "png"), ("JPEG", "jpeg"), ("TIFF", "tiff"), ("WEBP", "webp"),
                                       ("GIF", "gif"), ("BMP", "bmp")])
def test_an_image_is_known_by_its_content_not_its_name(fmt, kind):
    assert kind_of("scan.pdf", image(fmt)) == kind


def test_a_jsonl_file_is_a_batch_file():
    assert kind_of("requests.JSONL", b'{"x": 1}') == "jsonl"


def test_an_unsupported_type_is_an_error_saying_what_is_accepted():
    with pytest.raises(DocumentError, match="unsupported type: not one of PNG, JPEG, WebP, TIFF, GIF, BMP, PDF"):
        kind_of("notes.txt", b"hello")


def test_an_empty_file_is_an_error():
    with pytest.raises(DocumentError, match="the file is empty"):
        kind_of("a.pdf", b"")


def test_a_pdf_becomes_one_single_page_pdf_per_page_in_order_each_cut_out_when_asked():
    doc = split("a.pdf", samples.pdf_of_sizes([(100, 200), (300, 100), (50, 50)]), max_pages=10)
    assert [(p.page, p.body, p.content_type) for p in doc.parts] == [(n, None, "application/pdf") for n in (1, 2, 3)]
    sizes = []
    for p in reversed(doc.parts):
        one = pdfium.PdfDocument(doc.body(p))
        assert len(one) == 1
        sizes.append(tuple(round(x) for x in one[0].get_size()))
    doc.close()
    assert sizes == [(50, 50), (300, 100), (100, 200)]


def test_a_pdf_with_too_many_pages_is_an_error_naming_the_limit():
    with pytest.raises(DocumentError, match="the PDF has 3 pages; the limit is 2 \\(spec.limits.maxPagesPerDocument\\)"):
        split("a.pdf", samples.pdf_of_sizes([(10, 10)] * 3), max_pages=2)


@pytest.mark.parametrize("data", [samples.empty_pdf(), b"%PDF-1.4\nnot really\n"], ids=["no-pages", "corrupt"])
def test_a_pdf_without_pages_or_corrupt_is_an_error_saying_so(data):
    with pytest.raises(DocumentError, match="^the PDF could not be opened: it is damaged, encrypted or has no pages$"):
        split("a.pdf", data, max_pages=10)


def test_a_multipage_tiff_is_cut_into_one_page_tiffs_each_with_its_own_pixels():
    data = image("TIFF", frames=3)
    doc = split("a.tif", data, max_pages=10)
    bodies = [doc.body(p) for p in doc.parts]
    doc.close()
    assert [(p.page, p.pages) for p in doc.parts] == [(1, None), (2, None), (3, None)]
    for n, body in enumerate(bodies):
        with Image.open(io.BytesIO(body)) as one:
            assert getattr(one, "n_frames", 1) == 1 and one.getpixel((0, 0)) == (n * 40, 0, 0)
        assert body != data


def test_a_one_page_tiff_is_sent_as_it_is():
    data = image("TIFF")
    doc = split("a.tif", data, max_pages=10)
    assert [(p.page, p.body == data) for p in doc.parts] == [(1, True)]


def test_a_tiff_with_too_many_pages_is_an_error():
    with pytest.raises(DocumentError, match="more than 2 pages"):
        split("a.tif", image("TIFF", frames=3), max_pages=2)


def line(custom_id: str, **over) -> str:
    item = {"custom_id": custom_id, "method": "POST", "url": CHAT,
            "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}
    item.update(over)
    return json.dumps(item)


def test_each_line_of_a_batch_file_is_one_chat_request_and_a_bad_line_is_an_error_of_that_line():
    text = "\n".join([line("a"), "{not json", line("b", url="/v1/embeddings"), "", line("a"), line("c")])
    result = split("in.jsonl", text.encode(), max_pages=10)
    assert [(p.page, p.custom_id, p.endpoint) for p in result.parts] == [(1, "a", CHAT), (6, "c", CHAT)]
    assert json.loads(result.parts[0].body)["messages"][0]["content"] == "hi"
    reasons = dict(result.errors)
    assert "not JSON" in reasons[2] and "only POST /v1/chat/completions" in reasons[3] and "not unique" in reasons[5]
    assert result.pages == 5


def test_a_batch_file_with_more_requests_than_the_limit_is_an_error():
    with pytest.raises(DocumentError, match="3 requests; the limit is 2"):
        split("in.jsonl", "\n".join(line(c) for c in "abc").encode(), max_pages=2)
