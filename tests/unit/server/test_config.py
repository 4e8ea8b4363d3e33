"""Config: YAML sections, env overrides, validation that names the key."""

from __future__ import annotations

import pytest

from ocr_limits import SETTINGS
from ocr_server.runtime.config import ENV_KEYS, ConfigError, crops_allowed, crops_required, load_config, validate_against_model


def test_built_in_defaults():
    """No file, no environment: the model's 1024 px global view with 768 px crops, at most 1024
    visual tokens, 4 requests at once in batches of 8, 30 s per request, port 8080."""
    cfg = load_config(env={})
    assert (cfg.model.input_size, cfg.model.base_size, cfg.model.max_visual_tokens) == (768, 1024, 1024)
    assert (cfg.runtime.concurrency, cfg.runtime.batch_size, cfg.runtime.timeout_sec) == (4, 8, 30.0)
    assert (cfg.service.port, str(cfg.model.model_dir)) == (8080, "/models/deepseek-ai/DeepSeek-OCR-2")


def test_an_unset_token_cap_follows_the_engine():
    assert load_config(env={}).model.max_visual_tokens == 1024
    assert load_config(env={"ENGINE": "transformers"}).model.max_visual_tokens == 1024
    assert load_config(env={"ENGINE": "vllm"}).model.max_visual_tokens == 1120


def test_a_null_token_cap_in_the_file_is_unset(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("runtime: {engine: vllm}\nmodel: {max_visual_tokens: null}\n")
    assert load_config(env={"CONFIG_FILE": str(f)}).model.max_visual_tokens == 1120


def test_a_token_cap_that_is_set_is_kept_or_refused_naming_the_key():
    assert load_config(env={"MAX_VISUAL_TOKENS": "544"}).model.max_visual_tokens == 544
    with pytest.raises(ConfigError, match="MAX_VISUAL_TOKENS=1024 is not allowed: 1120 with ENGINE=vllm"):
        load_config(env={"ENGINE": "vllm", "MAX_VISUAL_TOKENS": "1024"})


def test_vllm_refuses_a_token_floor_above_two_crops_naming_the_key():
    with pytest.raises(ConfigError, match="MIN_VISUAL_TOKENS=545 is not allowed: <= 544 with ENGINE=vllm"):
        load_config(env={"ENGINE": "vllm", "MIN_VISUAL_TOKENS": "545"})


def test_the_shared_defaults_are_ocr_limits():
    cfg = load_config(env={})
    for s in SETTINGS:
        if s.default is not None and s.env in ENV_KEYS:
            section, key = ENV_KEYS[s.env]
            assert getattr(getattr(cfg, section), key) == s.default, s.env


def test_environment_overrides_the_yaml_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("service: {port: 9000}\nruntime: {batch_size: 4, timeout_sec: 10}\nmodel: {cache_dir: /data}\n")
    cfg = load_config(env={"CONFIG_FILE": str(f), "BATCH_SIZE": "2", "API_KEYS": "key-aaaaaaaa, key-bbbbbbbb"})
    assert (cfg.service.port, cfg.runtime.batch_size, cfg.runtime.timeout_sec) == (9000, 2, 10.0)
    assert cfg.service.api_keys == ("key-aaaaaaaa", "key-bbbbbbbb")
    assert str(cfg.model.model_dir) == "/data/deepseek-ai/DeepSeek-OCR-2"


def test_model_path_wins_over_cache_dir():
    assert str(load_config(env={"MODEL_PATH": "/w", "CACHE_DIR": "/c"}).model.model_dir) == "/w"


@pytest.mark.parametrize("env,needle", [
    ({"MAX_VISUAL_TOKENS": "1200"}, "MAX_VISUAL_TOKENS=1200"),
    ({"MIN_VISUAL_TOKENS": "100"}, "MIN_VISUAL_TOKENS=100"),
    ({"MAX_VISUAL_TOKENS": "400", "MIN_VISUAL_TOKENS": "500"}, "MAX_VISUAL_TOKENS=400"),
    ({"INPUT_SIZE": "700"}, "INPUT_SIZE=700"),
    ({"PORT": "70000"}, "PORT=70000"),
    ({"TIMEOUT_SEC": "0"}, "TIMEOUT_SEC=0"),
    ({"API_KEYS": "short"}, "API_KEYS"),
    ({"GPU_ID": "x"}, "GPU_ID='x'"),
], ids=["tokens above 1120", "tokens below 256", "max below min", "size not a multiple of 64", "port", "timeout", "short key", "gpu id"])
def test_impossible_values_raise_naming_the_key(env, needle):
    with pytest.raises(ConfigError) as err:
        load_config(env=env)
    assert needle in str(err.value)


def test_unknown_yaml_key_is_rejected(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("runtime: {batchsize: 4}\n")
    with pytest.raises(ConfigError, match="runtime.batchsize"):
        load_config(env={"CONFIG_FILE": str(f)})


def test_input_size_must_match_the_model_query_embeddings():
    cfg = load_config(env={"INPUT_SIZE": "512"})
    with pytest.raises(ConfigError, match="INPUT_SIZE=512.*768"):
        validate_against_model(cfg, {768: 144, 1024: 256})


@pytest.mark.parametrize("tokens,crops", [(256, 0), (543, 0), (544, 2), (688, 3), (1024, 5), (1120, 6)])
def test_visual_token_cap_gives_the_crop_count(tokens, crops):
    assert crops_allowed(tokens) == crops


def test_visual_token_floor_needs_at_least_two_crops():
    assert (crops_required(256), crops_required(300), crops_required(700)) == (0, 2, 4)


def test_tls_needs_both_files_and_names_the_missing_one(tmp_path):
    cert = tmp_path / "tls.crt"
    cert.write_text("pem")
    with pytest.raises(ConfigError, match="TLS_KEY_FILE"):
        load_config(env={"TLS_CERT_FILE": str(cert)})
    with pytest.raises(ConfigError, match="TLS_KEY_FILE='/nope/tls.key'.*existing PEM file"):
        load_config(env={"TLS_CERT_FILE": str(cert), "TLS_KEY_FILE": "/nope/tls.key"})
    assert load_config(env={}).service.tls_cert_file is None


def test_warmup_and_split_keys_are_validated():
    assert load_config(env={}).runtime.warmup is True and load_config(env={"WARMUP": "0"}).runtime.warmup is False
    assert load_config(env={"SPLIT_PAGES": "auto"}).runtime.split_pages == "auto"
    with pytest.raises(ConfigError, match="WARMUP='maybe'"):
        load_config(env={"WARMUP": "maybe"})
    with pytest.raises(ConfigError, match="SPLIT_PAGES='always'"):
        load_config(env={"SPLIT_PAGES": "always"})
