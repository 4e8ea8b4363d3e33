"""What a batch writes for a document (ocr_batch_worker.results)."""

import json

import pytest

from ocr_batch_worker import results

ANSWER = {"pages": [{"page": 1, "text": "Hello", "raw": "Hello", "finished": True,
                     "blocks": [{"label": "text", "box": [1, 2, 3, 4], "boxes": [[1, 2, 3, 4]], "text": "Hello", "page": 1}],
                     "layout": {"visual_tokens": 256}, "usage": {"visual_tokens": 256, "generated_tokens": 3,
                                                                 "prompt_tokens": 290, "pages": 1}}],
          "model": {"name": "deepseek-ai/DeepSeek-OCR-2", "revision": "abc123"}}


def test_results_are_named_by_the_input_key_and_its_content_hash():
    a, b = results.digest(b"one"), results.digest(b"two")
    assert a != b and len(a) == results.DIGEST_CHARS
    assert results.result_key("in/x.pdf", a) == f"results/in/x.pdf.{a}.jsonl"
    assert results.markdown_key("in/x.pdf", a) == f"results/in/x.pdf.{a}.md"


def test_a_page_record_has_the_documents_page_number_text_blocks_tokens_and_model_revision():
    record = results.page_record("x.pdf", "d1", 7, ANSWER)
    assert (record["document"], record["sha256"], record["page"], record["text"]) == ("x.pdf", "d1", 7, "Hello")
    assert record["blocks"][0]["page"] == 7 and record["blocks"][0]["box"] == [1, 2, 3, 4]
    assert record["usage"]["generated_tokens"] == 3 and record["model"]["revision"] == "abc123"


def test_an_answer_for_more_or_fewer_than_one_page_is_refused():
    with pytest.raises(ValueError, match="2 pages"):
        results.page_record("x.pdf", "d1", 1, {**ANSWER, "pages": ANSWER["pages"] * 2})


def test_the_markdown_has_every_page_in_order_and_a_failed_pages_reason():
    records = [results.page_record("x.pdf", "d", 1, ANSWER), results.error_record("x.pdf", "d", 2, "400: truncated --")]
    text = results.markdown("x.pdf", records).decode()
    assert text.index("<!-- x.pdf page 1 -->") < text.index("Hello") < text.index("page 2: failed: 400: truncated")
    assert text.count("-->") == 2  # a reason cannot close its comment early


def test_each_documents_errors_are_an_object_of_their_own_with_a_fixed_length_name():
    a = results.errors_key(3, "scans/a.pdf", "0123456789abcdef")
    assert a.startswith("errors/index-00003.") and a.endswith(".jsonl") and len(a) == len("errors/index-00003.") + 38
    assert a == results.errors_key(3, "scans/a.pdf", "0123456789abcdef")  # a redo replaces it
    others = {results.errors_key(3, "scans/a.pdf", None), results.errors_key(3, "scans/a.pdf", "f" * 16),
              results.errors_key(3, "scans/b.pdf", "0123456789abcdef"), results.errors_key(3, "n" * 900, None)}
    assert a not in others and len(others) == 4 and max(map(len, others)) == len(a)


def test_the_errors_file_reads_back_what_was_written_and_skips_a_torn_line():
    entries = [results.error_record("a.pdf", "h", 1, "r", 400)]
    assert results.parse_jsonl(results.jsonl(entries) + b'{"document": "torn') == entries


def test_a_result_file_counts_its_done_and_failed_pages():
    data = results.jsonl([results.page_record("x.pdf", "d", 1, ANSWER), results.error_record("x.pdf", "d", 2, "r")])
    assert results.count_result(data) == (1, 1, False)


def test_a_result_file_of_a_document_that_failed_whole_says_so():
    assert results.count_result(results.jsonl([results.error_record("x.pdf", "d", None, "corrupt")])) == (0, 0, True)


def test_a_result_file_none_of_whose_pages_was_read_is_a_failed_document():
    pages = [results.error_record("x.png", "d", 1, "the image declares more than 64000000 pixels", 413)]
    assert results.count_result(results.jsonl(pages)) == (0, 1, True)
    failed = results.chat_record("req-2", 4, "d", None, None, "line 4 is not JSON")
    assert results.count_result(results.jsonl([failed])) == (0, 1, True)


def test_a_batch_file_line_is_written_in_the_openai_batch_output_format():
    ok = results.chat_record("req-1", 3, "d", 200, {"choices": []}, None)
    assert ok == {"id": "batch_req_d_3", "custom_id": "req-1",
                  "response": {"status_code": 200, "request_id": "batch_req_d_3", "body": {"choices": []}}, "error": None}
    failed = results.chat_record("req-2", 4, "d", None, None, "no answer")
    assert failed["response"] is None and failed["error"] == {"code": "request_failed", "message": "no answer"}
    assert results.count_result(results.jsonl([ok, failed])) == (1, 1, False)


def test_jsonl_is_one_compact_object_per_line():
    out = results.jsonl([{"a": 1}, {"b": "é"}]).decode()
    assert out.splitlines() == ['{"a":1}', '{"b":"é"}'] and [json.loads(x) for x in out.splitlines()]
