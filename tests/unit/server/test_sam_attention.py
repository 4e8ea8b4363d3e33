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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch,rows,cols,window", [(2, 8, 8, 0), (3, 14, 14, 14), (1, 6, 10, 0)])
def test_the_dense_forward_gives_transformers_bits(batch, rows, cols, window, dtype):
    """The CPU path is transformers' arithmetic with the bias written once: equal to the bit."""
    module = attention(window=window).to(dtype)
    x = torch.randn(batch, rows, cols, 96, dtype=dtype)
    with torch.no_grad():
        want, _ = module(x)
        got, weights = types.MethodType(sam_attention.dense_forward, module)(x)
    assert weights is None
    assert torch.equal(got, want)


def test_the_dense_forward_writes_no_second_copy_of_the_bias():
    """transformers' reshape of its [heads, N, N] bias copies it (the add's output has the einsums'
    permuted strides); the dense forward's bias is a view of the add's output."""
    module = attention(image=256)  # a global layer of 16x16 tokens: the bias is 4 x 256 x 256
    x = torch.randn(1, 16, 16, 96)
    bias_elements = 4 * 256 * 256

    def copied_elements(forward) -> int:
        with torch.no_grad(), torch.profiler.profile(record_shapes=True) as prof:
            forward(x)
        sizes = [e.input_shapes[0] for e in prof.events() if e.name == "aten::copy_" and e.input_shapes]
        return max((int(torch.Size(s).numel()) for s in sizes), default=0)

    assert copied_elements(module) >= bias_elements  # what the change removes, seen in transformers' own
    assert copied_elements(types.MethodType(sam_attention.dense_forward, module)) < bias_elements


def test_install_gives_a_model_on_a_cpu_the_dense_forward_once():
    """On a CPU the arithmetic is the cost and the folded head triples it: the bias stays dense."""
    model = torch.nn.Sequential(attention(), attention(window=14))
    assert sam_attention.install(model) == 2
    assert all(layer.forward.__func__ is sam_attention.dense_forward for layer in model)
    assert model[0]._sam_bias is model[1]._sam_bias  # one buffer: the layers run one after another
    assert sam_attention.install(model) == 0


def test_layers_sharing_the_kept_bias_buffer_give_transformers_bits():
    """A global layer, then a windowed one, then the global one again: each writes its bias over
    the last one's memory, and each output is still transformers' own."""
    layers = [attention(image=128), attention(image=128, window=7)]
    buffer = sam_attention.BiasBuffer()
    xs = [torch.randn(1, 8, 8, 96), torch.randn(4, 7, 7, 96)]  # the whole view; four 7x7 windows
    with torch.no_grad():
        wants = [layer(x)[0] for layer, x in zip(layers, xs)]
        for layer in layers:
            layer._sam_bias = buffer
        forwards = [types.MethodType(sam_attention.dense_forward, layer) for layer in layers]
        got = [forwards[0](xs[0])[0], forwards[1](xs[1])[0], forwards[0](xs[0])[0]]
    assert torch.equal(got[0], wants[0]) and torch.equal(got[1], wants[1]) and torch.equal(got[2], wants[0])


def test_the_buffer_grows_to_the_largest_bias_and_keeps_its_memory():
    buffer, like = sam_attention.BiasBuffer(), torch.zeros(1, dtype=torch.bfloat16)
    big = buffer.take((2, 3, 4), like)
    small = buffer.take((5,), like)
    assert big.dtype == torch.bfloat16 and small.data_ptr() == big.data_ptr()  # no new block for a smaller one
    assert buffer.take((7, 7), like).data_ptr() != big.data_ptr()  # a larger one: a new block
    assert buffer.take((3,), torch.zeros(1)).dtype == torch.float32  # another dtype: its own block


def test_a_copied_layer_gets_an_empty_buffer_of_its_own_and_the_same_outputs():
    """bench/prefill_profile.py deep-copies an installed layer; a thread-local cannot be copied."""
    import copy

    model = torch.nn.Sequential(attention())
    sam_attention.install(model)
    x = torch.randn(1, 8, 8, 96)
    with torch.no_grad():
        want, _ = model[0](x)
        twin = copy.deepcopy(model[0])
        got, _ = twin(x)
    assert twin._sam_bias is not model[0]._sam_bias and torch.equal(got, want)


def test_with_autograd_on_the_bias_is_a_fresh_tensor():
    """add(out=...) is not differentiable: a forward that builds a graph keeps transformers' own add."""
    module = attention()
    module._sam_bias = sam_attention.BiasBuffer()
    x = torch.randn(1, 8, 8, 96, requires_grad=True)
    out, _ = types.MethodType(sam_attention.dense_forward, module)(x)
    out.sum().backward()
    assert x.grad is not None and getattr(module._sam_bias._local, "flat", None) is None
