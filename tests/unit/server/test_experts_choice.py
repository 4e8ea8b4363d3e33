"""EXPERTS=auto picks grouped GEMM only where torch has one kernel for it (bf16 on sm90 or sm100 with a
torch that has it, or a CPU torch with its grouped mm), else batched GEMM; explicit choices that
cannot be captured in CUDA graphs are refused naming the setting."""

from __future__ import annotations

import pytest
import torch

from ocr_server.engines.transformers.experts import Hardware, choose, choose_prefill, torch_version

BF16, F32, F16 = torch.bfloat16, torch.float32, torch.float16


@pytest.mark.parametrize("hw,want", [
    (Hardware("cuda", BF16, (9, 0), (2, 11)), "grouped_mm"),  # H100/H200
    (Hardware("cuda", BF16, (9, 0), (2, 8)), "grouped_mm"),
    (Hardware("cuda", BF16, (9, 0), (2, 7)), "batched_mm"),  # no torch._grouped_mm yet
    (Hardware("cuda", BF16, (10, 0), (2, 11)), "grouped_mm"),  # B200
    (Hardware("cuda", BF16, (10, 0), (2, 8)), "batched_mm"),  # sm100 kernel from torch 2.9
    (Hardware("cuda", BF16, (8, 0), (2, 11)), "batched_mm"),  # A100: grouped mm loops from the host
    (Hardware("cuda", BF16, (8, 9), (2, 11)), "batched_mm"),  # L4, L40S
    (Hardware("cuda", BF16, (12, 0), (2, 11)), "batched_mm"),  # consumer Blackwell: no kernel
    (Hardware("cuda", F32, (9, 0), (2, 11)), "batched_mm"),  # DTYPE=float32: the kernel is bf16 only
    (Hardware("cuda", F16, (9, 0), (2, 11)), "batched_mm"),
    (Hardware("cpu", F32, None, (2, 11)), "grouped_mm"),
    (Hardware("cpu", BF16, None, (2, 9)), "grouped_mm"),
    (Hardware("cpu", F32, None, (2, 8)), "batched_mm"),  # no CPU kernel before torch 2.9
])
def test_auto_picks_grouped_gemm_only_where_it_is_one_kernel(hw, want):
    assert choose("auto", hw, graphs=True) == want
    assert choose_prefill("auto", hw) == ("grouped_mm" if want == "grouped_mm" else "eager")


@pytest.mark.parametrize("hw,want", [
    (Hardware("cuda", BF16, (9, 0), (2, 11)), "grouped_mm"),
    (Hardware("cuda", BF16, (8, 0), (2, 11)), "eager"),
    (Hardware("cpu", F32, None, (2, 11)), "grouped_mm"),
])
def test_a_prefill_never_copies_experts_per_token_even_with_experts_batched_mm(hw, want):
    """EXPERTS=batched_mm names the decode step's implementation; a prefill of 4 real pages with it
    asked an H200 for 44.6 GiB more (bench/gpu_check.sh, 2026-12-04)."""
    assert choose_prefill("batched_mm", hw) == want
    assert choose_prefill("eager", hw) == "eager" and choose_prefill("grouped_mm", hw) == "grouped_mm"


@pytest.mark.parametrize("setting", ["grouped_mm", "batched_mm", "eager"])
def test_an_explicit_choice_is_kept_where_it_can_run(setting):
    assert choose(setting, Hardware("cuda", BF16, (9, 0), (2, 11)), graphs=setting != "eager") == setting
    assert choose(setting, Hardware("cpu", F32, None, (2, 11)), graphs=True) == setting  # no graphs on a CPU


def test_choices_that_cannot_be_captured_are_refused_naming_the_setting():
    with pytest.raises(ValueError, match="EXPERTS=eager .*CUDA_GRAPHS=false"):
        choose("eager", Hardware("cuda", BF16, (9, 0), (2, 11)), graphs=True)
    with pytest.raises(ValueError, match="EXPERTS=grouped_mm .*float32.*\\(9, 0\\)"):
        choose("grouped_mm", Hardware("cuda", F32, (9, 0), (2, 11)), graphs=True)
    assert choose("grouped_mm", Hardware("cuda", F32, (9, 0), (2, 11)), graphs=False) == "grouped_mm"
    with pytest.raises(ValueError, match="must be one of"):
        choose("sonic", Hardware("cpu", F32), graphs=False)


@pytest.mark.parametrize("text,want", [("2.11.0+cu130", (2, 11)), ("2.9.1", (2, 9)), ("2.15.0a0+git1234", (2, 15)),
                                       ("3.0.0rc1", (3, 0))])
def test_torch_versions_are_read_as_major_and_minor(text, want):
    assert torch_version(text) == want
