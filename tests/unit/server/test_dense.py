"""Dense pages: when a page is split, into which parts, and how the parts' texts are merged."""

from __future__ import annotations

import pytest

from ocr_server.serving.split import merge_parts, plan_split, view_fit
from ocr_server.serving.grounding import rebase_grounding
from ocr_server.serving.grounding import parse_output

GRID = dict(crop_size=768, base_size=1024, min_crops=2)


def split(width, height, max_crops=6, **kw):
    return plan_split(width, height, **GRID, max_crops=max_crops, max_downscale=kw.get("max_downscale", 2.0),
                      overlap=kw.get("overlap", 0.1), max_parts=kw.get("max_parts", 6))


@pytest.mark.parametrize("size", [(600, 400), (2480, 3508), (2000, 1000), (800, 2400), (500, 4000)],
                         ids=["small", "A4 at 300 dpi", "2:1 landscape", "3:1 receipt", "8:1 strip the 1x6 grid still covers"])
def test_pages_the_grid_covers_are_not_split(size):
    assert split(*size) is None


def test_a_page_narrower_than_the_grid_is_cut_top_to_bottom_with_overlap():
    plan = split(300, 4000)  # 13:1, squeezed by the 1x6 grid
    assert plan is not None and plan.reason == "aspect"
    boxes = plan.boxes
    assert len(boxes) >= 2 and all(b[0] == 0 and b[2] == 300 for b in boxes)
    assert boxes[0][1] == 0 and boxes[-1][3] == 4000
    for prev, nxt in zip(boxes, boxes[1:]):
        assert nxt[1] < prev[3] and prev[3] - nxt[1] >= plan.overlap > 0  # neighbours overlap
    for b in boxes:
        fit = view_fit(b[2] - b[0], b[3] - b[1], **GRID, max_crops=6)
        assert fit.distortion <= 1.5 and fit.downscale <= 2.0


def test_a_huge_scan_is_cut_for_density_and_a_wide_page_left_to_right():
    plan = split(7000, 9000)  # a newspaper scanned at 600 dpi: text shrunk ~4x on the 2x3 grid
    assert plan is not None and plan.reason == "density" and all(b[0] == 0 and b[2] == 7000 for b in plan.boxes)
    wide = split(4000, 300)
    assert wide is not None and all(b[1] == 0 and b[3] == 300 for b in wide.boxes)
    assert wide.boxes[0][0] == 0 and wide.boxes[-1][2] == 4000


def test_global_view_only_counts_the_letterbox_shrink():
    # no crops allowed (MAX_VISUAL_TOKENS 256): a 600x4000 page would be shrunk 3.9x into 1024
    plan = split(600, 4000, max_crops=0)
    assert plan is not None and plan.reason == "density" and len(plan.boxes) == 3
    assert split(600, 2000, max_crops=0) is None


def test_the_part_count_is_capped():
    plan = split(100, 20000, max_parts=3)
    assert plan is not None and len(plan.boxes) == 3 and plan.boxes[-1][3] == 20000


A = "Title of the page\nFirst paragraph line one.\nSecond line of text here.\nThird line in the overlap.\nFourth line in the overlap."
B = "Third line in the overlap.\nFourth line in the overlap.\nFifth line only below.\nSixth and last line."
WHOLE = ("Title of the page\nFirst paragraph line one.\nSecond line of text here.\nThird line in the overlap.\n"
         "Fourth line in the overlap.\nFifth line only below.\nSixth and last line.")


def test_merge_keeps_order_and_the_overlap_once():
    assert merge_parts([A, B]) == WHOLE


def test_merge_drops_the_half_lines_at_the_cut():
    a = A + "\nFif li onl"  # the line the lower edge of part A cut in half
    b = "ourth lin  the overl\n" + B  # the line the upper edge of part B cut in half
    assert merge_parts([a, b]) == WHOLE


def test_merge_without_overlap_loses_nothing():
    a, b = "alpha beta gamma\ndelta", "epsilon zeta\neta theta"
    merged = merge_parts([a, b])
    assert merged == "alpha beta gamma\ndelta\nepsilon zeta\neta theta"


def test_a_short_common_line_is_not_taken_for_an_overlap():
    a, b = "Chapter one text goes here\n---", "---\nChapter two text goes here"
    assert merge_parts([a, b]).split("\n") == ["Chapter one text goes here", "---", "---", "Chapter two text goes here"]


def test_three_parts_merge_in_reading_order():
    p1 = "line 01 of the page\nline 02 of the page\nline 03 of the page"
    p2 = "line 02 of the page\nline 03 of the page\nline 04 of the page\nline 05 of the page"
    p3 = "line 05 of the page\nline 06 of the page"
    assert merge_parts([p1, p2, p3]) == "\n".join(f"line {i:02d} of the page" for i in range(1, 7))


def test_merge_compares_text_not_boxes_and_keeps_the_first_parts_boxes():
    a = ("<|ref|>text<|/ref|><|det|>[[10, 10, 900, 60]]<|/det|>\nA paragraph that is long enough.\n"
         "<|ref|>text<|/ref|><|det|>[[10, 800, 900, 860]]<|/det|>\nThe paragraph in the overlap band.")
    b = ("<|ref|>text<|/ref|><|det|>[[12, 40, 905, 100]]<|/det|>\nThe paragraph in the overlap band.\n"
         "<|ref|>text<|/ref|><|det|>[[10, 300, 900, 360]]<|/det|>\nA paragraph only in the lower part.")
    merged = merge_parts([a, b])
    assert merged.count("The paragraph in the overlap band.") == 1
    assert "[[12, 40, 905, 100]]" not in merged and "[[10, 800, 900, 860]]" in merged
    texts = [blk.text for blk in parse_output(merged, 1000, 1000).blocks]
    assert texts == ["A paragraph that is long enough.", "The paragraph in the overlap band.", "A paragraph only in the lower part."]


def test_boxes_of_a_part_are_rebased_to_the_page():
    # part = lower half of a 1000x2000 page; its box [0,0,999,999] is the lower half of the page
    raw = "<|ref|>text<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>\nhello"
    out = rebase_grounding(raw, (0, 1000, 1000, 2000), (1000, 2000))
    assert out == "<|ref|>text<|/ref|><|det|>[[0, 500, 999, 999]]<|/det|>\nhello"
    assert parse_output(out, 1000, 2000).blocks[0].boxes == [[0, 1001, 1000, 2000]]
