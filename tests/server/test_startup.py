"""The server refuses to start on a broken weights directory or a bad config, naming the problem."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from safetensors.torch import load_file, save_file

from localcluster.machine import pid_alive

from .conftest import ROOT

pytestmark = pytest.mark.server


def run_server(env: dict[str, str], timeout: float = 90,
               args: tuple[str, ...] = ("-m", "ocr_server")) -> subprocess.CompletedProcess:
    import os

    full = {**os.environ, "HOST": "127.0.0.1", "PORT": "1", "DEVICE": "cpu", **env}
    full.pop("API_KEYS", None)
    return subprocess.run([sys.executable, *args], env=full, cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize(
    "env,key,allowed",
    [
        ({"INPUT_SIZE": "512"}, "INPUT_SIZE=512", "768"),
        ({"MAX_VISUAL_TOKENS": "2000"}, "MAX_VISUAL_TOKENS=2000", "256..1120"),
        ({"MAX_VISUAL_TOKENS": "300", "MIN_VISUAL_TOKENS": "600"}, "MAX_VISUAL_TOKENS=300", "MIN_VISUAL_TOKENS"),
        ({"BATCH_SIZE": "zero"}, "BATCH_SIZE='zero'", "int"),
        ({"CONCURRENCY": "0"}, "CONCURRENCY=0", "1..256"),
        ({"ENGINE": "tensorrt"}, "ENGINE='tensorrt'", "transformers or vllm"),
        ({"ENGINE": "vllm", "MAX_VISUAL_TOKENS": "1024"}, "MAX_VISUAL_TOKENS=1024", "1120 with ENGINE=vllm"),
        ({"ENGINE": "vllm", "MAX_VISUAL_TOKENS": "1120"}, "MODEL_PATH", "ENGINE=vllm reads the official deepseek-ai layout"),
    ],
    ids=["input size the queries cannot serve", "visual tokens above 1120", "max below min", "not a number", "zero concurrency",
         "unknown engine", "vllm with a crop cap vllm cannot apply", "vllm with a transformers-native checkpoint"],
)
def test_bad_config_value_stops_the_process_naming_the_key(tiny_native, env, key, allowed):
    result = run_server({"MODEL_PATH": str(tiny_native), **env})
    assert result.returncode == 2, result.stderr[-2000:]
    assert key in result.stderr and allowed in result.stderr
    assert "Uvicorn running" not in result.stderr


def test_missing_weights_directory_is_named(tmp_path):
    result = run_server({"MODEL_PATH": str(tmp_path / "nowhere")})
    assert result.returncode == 2
    assert "MODEL_PATH" in result.stderr and "does not exist" in result.stderr


def test_a_missing_weights_directory_stops_the_process_before_torch_is_imported(tmp_path):
    """A wrong mount or MODEL_PATH crash-loops a pod: each start should say so at once, not after
    seconds of importing torch and transformers."""
    code = ("import atexit, runpy, sys; atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, "
            "file=sys.stderr)); runpy.run_module('ocr_server', run_name='__main__')")
    result = run_server({"MODEL_PATH": str(tmp_path / "nowhere")}, timeout=60, args=("-c", code))
    assert result.returncode == 2 and "does not exist" in result.stderr, result.stderr[-2000:]
    assert "torch imported: False" in result.stderr, result.stderr[-2000:]


def test_a_compiled_decode_step_on_a_cpu_is_refused_before_the_weights_load(tiny_native):
    """DECODE_COMPILE compiles the step while the warm-up captures its CUDA graphs; on a CPU each
    shape would compile in the middle of serving."""
    result = run_server({"MODEL_PATH": str(tiny_native), "DECODE_COMPILE": "true"})
    assert result.returncode == 3, result.stderr[-2000:]
    assert "DECODE_COMPILE=true" in result.stderr and "CUDA_GRAPHS" in result.stderr
    assert "weights loaded" not in result.stderr


def test_config_file_sections_apply_and_env_overrides_them(tiny_native, tmp_path):
    cfg = tmp_path / "server.yaml"
    cfg.write_text(f"model:\n  path: {tiny_native}\n  input_size: 640\nruntime:\n  batch_size: 4\n")
    result = run_server({"CONFIG_FILE": str(cfg)})
    assert result.returncode == 2 and "INPUT_SIZE=640" in result.stderr
    result = run_server({"CONFIG_FILE": str(cfg), "INPUT_SIZE": "768", "BATCH_SIZE": "0"})
    assert result.returncode == 2 and "BATCH_SIZE=0" in result.stderr


def test_weights_with_a_missing_tensor_are_refused(tiny_native, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_native, broken)
    state = load_file(str(broken / "model.safetensors"))
    victim = "model.vision_tower.query_1024_resolution.weight"
    assert victim in state
    del state[victim]
    save_file(state, str(broken / "model.safetensors"), metadata={"format": "pt"})
    result = run_server({"MODEL_PATH": str(broken)})
    assert result.returncode == 3, result.stderr[-2000:]
    assert "weights loaded" in result.stderr and "1 missing keys" in result.stderr
    assert "refusing to serve" in result.stderr and victim in result.stderr


def test_tokenizer_that_does_not_fit_the_config_is_refused(tiny_native, tmp_path):
    broken = tmp_path / "small-vocab"
    shutil.copytree(tiny_native, broken)
    config = json.loads((broken / "config.json").read_text())
    config["image_token_id"] = 128000
    (broken / "config.json").write_text(json.dumps(config))
    result = run_server({"MODEL_PATH": str(broken)})
    assert result.returncode == 3, result.stderr[-2000:]
    assert "refusing to serve" in result.stderr and "<image>" in result.stderr


def test_a_test_servers_process_ends_when_the_test_process_that_started_it_is_killed(tiny_native, tmp_path):
    """A killed test run leaves no `python -m ocr_server` behind (start_server's parent-death signal)."""
    import os
    import time

    code = ("import sys, time; from pathlib import Path; from tests.server.conftest import start_server; "
            "s = start_server(Path(sys.argv[1]), {'MODEL_PATH': sys.argv[2]}, wait_ready=False); "
            "print(s.proc.pid, flush=True); time.sleep(300)")
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(tiny_native)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())

    assert pid_alive(server_pid)
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 60
    while pid_alive(server_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(server_pid):
        os.kill(server_pid, 9)
    assert not pid_alive(server_pid), "the server outlived the killed test process"
