"""OCR over HTTP against the real server process and the tiny model (its text is meaningless)."""

from __future__ import annotations

import base64
import re

import pytest

from . import samples
from .conftest import start_server, wait_for

pytestmark = pytest.mark.server


def metric(text: str, name: str, labels: str = "") -> float:
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_health_is_503_while_loading_then_200_with_model_name_and_version(main_server):
    first = main_server.first_health
    assert first is not None and first.status_code == 503
    assert first.json()["status"] == "loading" and first.headers["retry-after"]
    ready = wait_for(main_server, 200)
    body = ready.json()
    assert body["status"] == "ok" and "TINY RANDOM MODEL" in body["model"] and body["version"] and body["revision"]
    assert main_server.proc.poll() is None
    assert "weights loaded" in main_server.log() and "0 missing keys" in main_server.log()
    assert "meaningless" in main_server.log()


def test_dtype_bfloat16_loads_and_runs_the_model_in_bfloat16_on_a_cpu(tiny_native, tmp_path):
    bf16 = start_server(tmp_path, {"MODEL_PATH": str(tiny_native), "DTYPE": "bfloat16", "MAX_NEW_TOKENS": "6"})
    try:
        with bf16.client() as c:
            assert c.get("/health").json()["dtype"] == "bfloat16"
            r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(600, 400), "image/png")})
        assert r.status_code == 200, r.text
        assert 1 <= r.json()["usage"]["generated_tokens"] <= 6
    finally:
        bf16.stop()


def test_live_and_ready_probes_answer_when_ready(server):
    with server.client() as c:
        assert c.get("/health/live").status_code == 200
        assert c.get("/health/ready").status_code == 200


def test_small_image_uses_the_global_view_only(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(600, 400), "image/png")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["layout"]["crops"] == 0 and body["layout"]["crop_grid"] == [0, 0]
    assert body["usage"]["visual_tokens"] == 256
    assert 1 <= body["usage"]["generated_tokens"] <= 6
    assert "TINY RANDOM MODEL" in body["model"]["name"] and body["cached"] is False
    assert set(body) >= {"text", "raw", "blocks", "layout", "usage", "timings", "model", "cached"}


def test_large_image_is_cropped_and_reports_grid_and_token_count(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("wide.png", samples.png(2000, 1000), "image/png")})
    assert r.status_code == 200, r.text
    layout = r.json()["layout"]
    assert layout["crop_grid"] == [2, 1] and layout["crops"] == 2
    assert layout["global_view"] == [1024, 1024] and layout["crop_size"] == [768, 768]
    assert r.json()["usage"]["visual_tokens"] == 256 + 144 * 2


def test_request_max_visual_tokens_caps_the_crops(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("wide.png", samples.png(2000, 1000, seed=3), "image/png")},
                   data={"max_visual_tokens": "400"})
    assert r.status_code == 200, r.text
    assert r.json()["layout"]["crops"] == 0 and r.json()["usage"]["visual_tokens"] == 256


def test_json_base64_request_gives_the_same_answer_as_multipart(server):
    data = samples.png(500, 300, seed=7)
    with server.client() as c:
        a = c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")}, data={"prompt_mode": "free"}).json()
        b = c.post("/v1/ocr", json={"image": base64.b64encode(data).decode(), "prompt_mode": "free"}).json()
    assert a["raw"] == b["raw"] and b["cached"] is True


def test_repeat_request_is_a_cache_hit_and_counted(server):
    data = samples.png(300, 300, seed=11)
    with server.client() as c:
        before = metric(c.get("/metrics").text, "ocr_cache_hits_total")
        first = c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")}).json()
        second = c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")}).json()
        after = metric(c.get("/metrics").text, "ocr_cache_hits_total")
    assert first["cached"] is False and second["cached"] is True
    assert second["raw"] == first["raw"] and after == before + 1


def test_metrics_change_after_requests(server):
    with server.client() as c:
        before = c.get("/metrics").text
        c.post("/v1/ocr", files={"file": ("p.png", samples.png(320, 200, seed=21), "image/png")})
        after = c.get("/metrics").text
    ok = '{class="interactive",endpoint="/v1/ocr",status="200"}'
    assert metric(after, "ocr_requests_total", ok) == metric(before, "ocr_requests_total", ok) + 1
    assert metric(after, "ocr_request_latency_seconds_count") > metric(before, "ocr_request_latency_seconds_count")
    assert metric(after, "ocr_visual_tokens_count") > metric(before, "ocr_visual_tokens_count")
    assert metric(after, "ocr_generated_tokens_count") > metric(before, "ocr_generated_tokens_count")
    assert metric(after, "ocr_model_loaded") == 1
    for name in ("ocr_queue_depth", "ocr_in_flight_requests", "ocr_batch_size_bucket"):
        assert name in after


def test_preprocessing_time_and_its_share_of_the_request_are_observed(server):
    with server.client() as c:
        before = c.get("/metrics").text
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(330, 210, seed=22), "image/png")})
        after = c.get("/metrics").text
    assert r.status_code == 200, r.text
    timings = r.json()["timings"]
    for name in ("ocr_preprocess_seconds", "ocr_preprocess_ratio"):
        assert metric(after, name + "_count") == metric(before, name + "_count") + 1, name
    took = metric(after, "ocr_preprocess_seconds_sum") - metric(before, "ocr_preprocess_seconds_sum")
    share = metric(after, "ocr_preprocess_ratio_sum") - metric(before, "ocr_preprocess_ratio_sum")
    assert took == pytest.approx(timings["preprocess_ms"] / 1000, abs=1e-4)
    assert share == pytest.approx(timings["preprocess_ms"] / timings["total_ms"], abs=1e-3) and 0 < share < 1


@pytest.mark.parametrize(
    "name,data,size",
    [
        ("cmyk.jpg", samples.cmyk_jpeg(), [300, 200]),
        ("gray16.png", samples.png16_gray(), [200, 100]),
        ("gray.png", samples.gray_png(), [200, 100]),
        ("one.png", samples.encode(samples.page(1, 1)), [1, 1]),
        ("anim.gif", samples.animated_gif(), [120, 80]),
        ("photo.jpg", samples.exif_rotated_jpeg(1600, 800), [800, 1600]),
        ("page.webp", samples.encode(samples.page(300, 200), "WEBP"), [300, 200]),
    ],
    ids=["cmyk jpeg", "16-bit png", "grayscale png", "1x1 image", "animated gif first frame",
         "exif rotated photo turned upright", "webp"],
)
def test_edge_case_images_are_read(server, name, data, size):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": (name, data, "application/octet-stream")})
    assert r.status_code == 200, r.text
    assert r.json()["layout"]["image_size"] == size


def test_exif_rotation_is_applied_before_cropping(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("photo.jpg", samples.exif_rotated_jpeg(2000, 1000), "image/jpeg")})
    # stored 2000x1000 landscape with Orientation 6: upright 1000x2000, a tall 1x2 grid
    assert r.json()["layout"]["crop_grid"] == [1, 2]


def test_pdf_pages_give_results_per_page(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("doc.pdf", samples.pdf(2), "application/pdf")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [p["page"] for p in body["pages"]] == [1, 2] and body["usage"]["pages"] == 2
    assert body["pages"][0]["layout"]["image_size"] == [400, 300]  # 200x150 pt at 144 dpi
    assert body["usage"]["visual_tokens"] == 2 * 256


def test_multipage_tiff_page_selection(server):
    with server.client() as c:
        r = c.post("/v1/ocr", files={"file": ("doc.tiff", samples.multipage_tiff(3), "image/tiff")}, data={"pages": "2-3"})
    assert r.status_code == 200, r.text
    assert [p["page"] for p in r.json()["pages"]] == [2, 3]


def test_raw_image_body_is_accepted(server):
    with server.client() as c:
        r = c.post("/v1/ocr?prompt_mode=free", content=samples.png(200, 200, seed=5), headers={"content-type": "image/png"})
    assert r.status_code == 200, r.text


def test_health_and_metrics_need_no_api_key_when_auth_is_off(server):
    with server.client() as c:
        assert c.post("/v1/ocr", files={"file": ("p.png", samples.png(64, 64), "image/png")}).status_code == 200
