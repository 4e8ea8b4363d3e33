"""The engine's settings (the slots decoder's, its sizing, DTYPE): bad values are refused naming the setting; buckets cover every length."""

from __future__ import annotations

import pytest

import torch

from ocr_server.runtime.config import ConfigError, load_config, resolve_dtype
from ocr_server.runtime.startup_checks import startup_warnings
from ocr_server.engines.api import StartupError
from ocr_server.engines.transformers.engine import compile_backend, resolve_decoder
from ocr_server.engines.transformers.slots import buckets, parse_buckets, pick


@pytest.mark.parametrize("key,value", [("DECODER", "fast"), ("DECODE_SLOTS", "-1"), ("DECODE_SLOTS", "5000"),
                                       ("DECODE_KV_BUCKETS", "1024,lots"), ("DECODE_KV_BUCKETS", "0,512"),
                                       ("EXPERTS", "sonic"), ("CUDA_GRAPHS", "perhaps"), ("DECODE_COMPILE", "maybe"),
                                       ("DTYPE", "float8"),
                                       ("DTYPE", "half")])
def test_a_bad_decoder_setting_is_refused_naming_it(key, value):
    with pytest.raises(ConfigError, match=key):
        load_config(env={key: value})


def test_the_decoder_defaults_to_auto_with_sizes_chosen_at_load():
    r = load_config(env={}).runtime
    assert (r.decoder, r.decode_slots, r.decode_kv_buckets, r.cuda_graphs, r.experts) == ("auto", 0, "", True, "auto")
    assert r.decode_compile is False


def test_the_decode_step_is_compiled_with_inductor_only_when_asked_on_a_gpu_with_graphs():
    assert compile_backend(load_config(env={}).runtime, torch.device("cuda")) == ""
    assert compile_backend(load_config(env={"DECODE_COMPILE": "true"}).runtime, torch.device("cuda")) == "inductor"


@pytest.mark.parametrize("env,device", [({"DECODE_COMPILE": "true"}, "cpu"),
                                        ({"DECODE_COMPILE": "true", "CUDA_GRAPHS": "false"}, "cuda")])
def test_a_compiled_step_without_a_gpu_or_graphs_is_refused_at_start_naming_both_settings(env, device):
    with pytest.raises(StartupError, match="DECODE_COMPILE=true .* CUDA_GRAPHS"):
        compile_backend(load_config(env=env).runtime, torch.device(device))


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_auto_picks_the_slots_decoder_on_every_device(device):
    assert resolve_decoder("auto", torch.device(device)) == "slots"


def test_an_explicit_decoder_is_kept():
    assert resolve_decoder("generate", torch.device("cuda")) == "generate"


@pytest.mark.parametrize("device,dtype", [("cuda", "bfloat16"), ("cpu", "float32")])
def test_auto_dtype_is_bfloat16_on_a_gpu_and_float32_on_a_cpu(device, dtype):
    assert load_config(env={}).runtime.dtype == "auto"
    assert resolve_dtype("auto", device) == dtype


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_explicit_dtype_is_kept_on_every_device(device):
    assert resolve_dtype(load_config(env={"DTYPE": "bfloat16"}).runtime.dtype, device) == "bfloat16"
    assert resolve_dtype(load_config(env={"DTYPE": "float32"}).runtime.dtype, device) == "float32"


def test_buckets_are_powers_of_two_ending_at_the_top():
    assert buckets(64, first=1) == (1, 2, 4, 8, 16, 32, 64)
    assert buckets(9312, first=512) == (512, 1024, 2048, 4096, 8192, 9312)
    assert buckets(300, first=512) == (300,)
    assert buckets(6, first=1) == (1, 2, 4, 6)


def test_configured_buckets_keep_the_top_and_drop_larger_ones():
    assert parse_buckets("2048, 1024,4096,20000", 3000, "DECODE_KV_BUCKETS") == (1024, 2048, 3000)


def test_pick_takes_the_smallest_bucket_that_holds_the_need():
    sizes = (512, 1024, 2048)
    assert [pick(sizes, n) for n in (1, 512, 513, 2048)] == [512, 512, 1024, 2048]
    with pytest.raises(ValueError):
        pick(sizes, 2049)


@pytest.mark.parametrize("env,warned", [({}, False), ({"DECODER": "generate"}, True), ({"ENGINE": "vllm"}, True)])
def test_batch_size_above_concurrency_is_warned_only_where_concurrency_caps_the_batch(env, warned):
    cfg = load_config(env={"BATCH_SIZE": "8", "CONCURRENCY": "4", **env})
    assert any(w.startswith("BATCH_SIZE=8 > CONCURRENCY=4") for w in startup_warnings(cfg)) is warned
