"""SAM's attention with the relative-position bias folded into the dot product (sam_attention.py) is
transformers' own function: the same outputs on random weights, global and windowed shapes, and a
model on a CPU is left as it is."""

from __future__ import annotations

import types

import pytest
import torch

from ocr_server.engines.transformers import sam_attention


def attention(hidden: int = 96, heads: int = 4, image: int = 128, window: int = 0, rel_pos: bool = True):
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionSdpaAttention

    config = types.SimpleNamespace(image_size=image, patch_size=16, num_attention_heads=heads, hidden_size=hidden,
                                   attention_dropout=0.0, qkv_bias=True, use_rel_pos=rel_pos)
    torch.manual_seed(0)
    module = DeepseekOcr2SamVisionSdpaAttention(config, window).eval()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.5)  # the relative-position tables too: transformers initialises them to zeros
    return module


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


def folded(module):
    module._sam_key_positions = {}
    return types.MethodType(sam_attention.forward, module)


@pytest.mark.parametrize("batch,rows,cols,window", [(2, 8, 8, 0), (3, 14, 14, 14), (1, 6, 10, 0)])
def test_the_folded_bias_gives_transformers_outputs(batch, rows, cols, window):
    """A global layer (8x8 tokens), a windowed one (14x14 windows) and a grid that is not square."""
    module = attention(window=window)
    x = torch.randn(batch, rows, cols, 96)
    with torch.no_grad():
        want, _ = module(x)
        got, weights = folded(module)(x)
        again, _ = folded(module)(x)  # the one-hot keys cached per shape
    assert weights is None and got.shape == want.shape
    assert relative_error(got, want) < 1e-5  # float32 rounding (a wrong bias term gives > 1e-2)
    torch.testing.assert_close(again, got, rtol=0, atol=0)


def test_without_relative_positions_it_is_plain_attention():
    module = attention(rel_pos=False)
    x = torch.randn(2, 8, 8, 96)
    with torch.no_grad():
        assert relative_error(folded(module)(x)[0], module(x)[0]) < 1e-5


def test_each_key_carries_its_row_and_column_one_hot_after_a_zero_head():
    keys = sam_attention.key_positions(2, 3, sam_attention.padded_width(4, 2, 3), 4, torch.device("cpu"), torch.float32)
    assert keys.shape == (6, 16)  # 4 + 2 + 3 = 9, padded to 16
    assert keys[:, :4].abs().sum() == 0 and keys[:, 9:].abs().sum() == 0
    assert keys[5, 4:9].tolist() == [0, 1, 0, 0, 1]  # key 5: row 1, column 2
    assert sam_attention.padded_width(64, 64, 64) == 192 and sam_attention.padded_width(64, 14, 14) == 96


def test_a_model_on_a_cpu_keeps_its_own_attention():
    """On a CPU the arithmetic is the cost, and the folded head triples it."""
    model = torch.nn.Sequential(attention())
    assert sam_attention.install(model) == 0
    assert "forward" not in vars(model[0])
