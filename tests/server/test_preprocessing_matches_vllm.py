"""The transformers engine shows the model the pixels and prompt ids vLLM's DeepSeek-OCR 2 processor shows it.

vLLM's processor copies the model's reference preprocessing (global view with `ImageOps.pad`,
crops with its `dynamic_preprocess`, one image token per visual token); the transformers engine
builds both with transformers' processor (engines/transformers/global_view.py pads the global view
as the reference does). Here both run on the same pages, vLLM's in .venv-vllm, and must be equal to
the bit: the global view, every crop in its order, and the prompt ids, for wide, tall, square and
odd sizes, with 0 to 6 crops (2 x 3, the largest grid: the most image tokens a page gets). No model
runs: the engine-equivalence module compares tokens through the full-size vision tower on two pages
(no crops, 2 crops; seconds of CPU per view), and what more crops change is all here: the model
only concatenates the views' features in this order, as many as the prompt has image tokens.
"""

from __future__ import annotations

import io
import json
import os
import subprocess

import numpy as np
import pytest
from PIL import Image

from . import samples
from .conftest import ROOT, VLLM_PYTHON

pytestmark = [pytest.mark.server]
# (width, height): no crops (wide, tall, odd margins), 1x2, 3x1, 2x2, 2x3, 2x1 tall, and odd sizes.
SIZES = [(600, 500), (500, 600), (700, 701), (2000, 1000), (1500, 500), (1000, 1000), (1000, 1400),
         (900, 1800), (1600, 900), (601, 1537), (777, 1003)]
VLLM_SIDE = """
import io, json, sys
import numpy as np
from PIL import Image
from transformers import PreTrainedTokenizerFast
from vllm.transformers_utils.processors.deepseek_ocr import DeepseekOCRProcessor
from tests.server import samples

tokenizer_dir, sizes, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
processor = DeepseekOCRProcessor(PreTrainedTokenizerFast.from_pretrained(tokenizer_dir), image_size=768,
                                 base_size=1024, strategy="v2")  # as vLLM's DeepSeek-OCR 2 model configures it
arrays = {}
for w, h in sizes:
    page = Image.open(io.BytesIO(samples.png(w, h, seed=w + h))).convert("RGB")
    got = processor.tokenize_with_images("<image>\\nFree OCR.", [page], bos=True, eos=True, cropping=True)
    arrays[f"{w}x{h}-global"], arrays[f"{w}x{h}-crops"] = np.asarray(got[1]), np.asarray(got[2])
    arrays[f"{w}x{h}-ids"] = np.asarray(got[0]).reshape(-1)  # the prompt vLLM's model reads (eos removed)
np.savez(out, **arrays)
"""


@pytest.fixture(scope="module")
def vllm_views(tiny_native, tmp_path_factory) -> dict[str, np.ndarray]:
    if not VLLM_PYTHON.is_file():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make venv-vllm` (make test does)")
    out = tmp_path_factory.mktemp("vllm-views") / "views.npz"
    subprocess.run([str(VLLM_PYTHON), "-c", VLLM_SIDE, str(tiny_native), json.dumps(SIZES), str(out)],
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
                   check=True, capture_output=True, timeout=300)
    with np.load(out) as views:
        return dict(views)


@pytest.fixture(scope="module")
def engine(tiny_native):
    from ocr_server.engines.transformers.engine import Engine
    from ocr_server.runtime.config import load_config

    e = Engine(load_config(env={"MODEL_PATH": str(tiny_native), "DEVICE": "cpu", "MAX_VISUAL_TOKENS": "1120"}))
    e.load_preprocessing()
    return e


@pytest.fixture(scope="module")
def ours(engine) -> dict[tuple[int, int], tuple]:
    """The engine's prompt ids, views and crop plan for each page, made once for both checks."""
    pages = {size: Image.open(io.BytesIO(samples.png(*size, seed=sum(size)))).convert("RGB") for size in SIZES}
    return {size: engine.prepare_arrays(page, prompt_mode="free", max_visual_tokens=None) for size, page in pages.items()}


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_global_view_and_every_crop_equal_vllms_to_the_bit(ours, vllm_views, size):
    w, h = size
    _, pixels, local, plan = ours[size]
    theirs_global, theirs_crops = vllm_views[f"{w}x{h}-global"], vllm_views[f"{w}x{h}-crops"]
    assert plan.crops == len(theirs_crops), (plan.crops, theirs_crops.shape)
    assert np.array_equal(np.asarray(pixels, dtype=np.float32), theirs_global.astype(np.float32))
    if plan.crops:
        assert np.array_equal(np.asarray(local, dtype=np.float32), theirs_crops.astype(np.float32))


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_the_prompt_ids_equal_vllms_image_tokens_and_text(ours, vllm_views, size):
    w, h = size
    ids, _, _, plan = ours[size]
    theirs = vllm_views[f"{w}x{h}-ids"].tolist()
    assert ids == theirs, (plan, len(ids), len(theirs), ids[-8:], theirs[-8:])
