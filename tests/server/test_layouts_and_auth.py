"""Both checkpoint layouts are served; API keys guard /v1/ocr but not health or metrics."""

from __future__ import annotations

import pytest

from . import samples
from .conftest import ROOT, start_server

pytestmark = pytest.mark.server
KEY = "test-key-0123456789"


@pytest.fixture(scope="module")
def official_with_keys(tiny_official, tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("official"), {
        "MODEL_PATH": str(tiny_official), "API_KEYS": f"other-key-abcdef,{KEY}", "MAX_NEW_TOKENS": "6",
    })
    yield server
    server.stop()


def test_official_layout_is_translated_and_served(official_with_keys, server):
    health = official_with_keys.client().get("/health").json()
    assert health["layout"].startswith("official") and "TINY RANDOM MODEL" in health["model"]
    assert "0 missing keys, 0 unexpected keys" in official_with_keys.log()
    page = samples.png(1500, 800, seed=9)
    with official_with_keys.client(headers={"Authorization": f"Bearer {KEY}"}) as c:
        official = c.post("/v1/ocr", files={"file": ("p.png", page, "image/png")})
    native = server.client().post("/v1/ocr", files={"file": ("p.png", page, "image/png")})
    assert official.status_code == 200 and native.status_code == 200
    # same random weights in two layouts: the same tokens (native server runs MAX_NEW_TOKENS=6 too)
    assert official.json()["raw"] == native.json()["raw"]
    assert official.json()["layout"] == native.json()["layout"]


def test_missing_or_wrong_key_is_401(official_with_keys):
    with official_with_keys.client() as c:
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(64, 64), "image/png")})
        assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
        r = c.post("/v1/ocr", files={"file": ("p.png", samples.png(64, 64), "image/png")},
                   headers={"Authorization": "Bearer wrong-key-123456"})
        assert r.status_code == 401


def test_x_api_key_header_is_accepted(official_with_keys):
    with official_with_keys.client(headers={"X-API-Key": KEY}) as c:
        assert c.post("/v1/ocr", files={"file": ("p.png", samples.png(64, 64), "image/png")}).status_code == 200


def test_health_and_metrics_stay_open_with_auth_on(official_with_keys):
    with official_with_keys.client() as c:
        assert c.get("/health").status_code == 200
        assert c.get("/health/live").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_convert_command_writes_a_native_directory_that_loads(tiny_official, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "converted"
    result = subprocess.run([sys.executable, "-m", "ocr_server.convert", str(tiny_official), str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    import json

    assert json.loads((out / "config.json").read_text())["model_type"] == "deepseek_ocr2"
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "model.vision_tower.query_768_resolution.weight" in keys
    assert not any(k.startswith("model.sam_model") for k in keys)
