"""spec.model.checksums: the server verifies the weights before loading and names a bad file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from ocr_server.runtime import checksums
from ocr_server.runtime.checksums import ChecksumError

from .conftest import ROOT, start_server
from .test_startup import run_server

pytestmark = pytest.mark.server


def model_dir(tmp_path):
    d = tmp_path / "m"
    (d / "sub").mkdir(parents=True)
    (d / "a.safetensors").write_bytes(b"a" * 100_000)
    (d / "sub" / "b.json").write_text("{}")
    (d / ".gitattributes").write_text("*")
    return d


def test_the_tool_lists_every_model_file_with_its_sha256(tmp_path):
    d = model_dir(tmp_path)
    sums = checksums.compute(d)
    assert sorted(sums) == ["a.safetensors", "sub/b.json"]
    import hashlib
    assert sums["a.safetensors"] == hashlib.sha256(b"a" * 100_000).hexdigest()
    out = subprocess.run([sys.executable, "-m", "ocr_server.checksums", str(d)], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert yaml.safe_load(out.stdout) == {"checksums": sums}  # pastes into spec.model
    out = subprocess.run([sys.executable, "-m", "ocr_server.checksums", "--json", str(d)], capture_output=True,
                         text=True, cwd=ROOT, check=True)
    assert json.loads(out.stdout) == sums


def test_a_changed_byte_is_reported_naming_the_file(tmp_path):
    d = model_dir(tmp_path)
    sums = checksums.compute(d)
    checksums.verify(d, sums)
    (d / "sub" / "b.json").write_text("{ }")
    with pytest.raises(ChecksumError, match=r"mismatch: sub/b\.json"):
        checksums.verify(d, sums)


def test_a_missing_file_and_a_path_outside_the_directory_are_refused(tmp_path):
    d = model_dir(tmp_path)
    with pytest.raises(ChecksumError, match="gone.bin is missing"):
        checksums.verify(d, {"gone.bin": "0" * 64})
    with pytest.raises(ChecksumError, match="leaves the model directory"):
        (tmp_path / "outside.bin").write_bytes(b"x")
        checksums.verify(d, {"../outside.bin": "0" * 64})


def test_without_a_checksum_file_nothing_is_verified(tmp_path):
    assert checksums.verify_configured(tmp_path, str(tmp_path / "config.yaml")) == 0
    assert checksums.verify_configured(tmp_path, None) == 0


def _operator_like_config(tmp_path, model: str, sums: dict[str, str]) -> str:
    """What the operator's ConfigMap mounts: config.yaml and model-checksums.json side by side."""
    etc = tmp_path / "etc-ocr"
    etc.mkdir()
    (etc / "config.yaml").write_text(yaml.safe_dump({"model": {"path": model}}))
    (etc / checksums.FILE_NAME).write_text(json.dumps(sums))
    return str(etc / "config.yaml")


def test_the_server_exits_before_loading_when_a_weight_file_differs(tiny_native, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_native, model)
    sums = checksums.compute(model)
    weights = next(n for n in sums if n.endswith(".safetensors"))
    sums[weights] = "0" * 64
    result = run_server({"CONFIG_FILE": _operator_like_config(tmp_path, str(model), sums)})
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"model checksum mismatch: {weights}" in result.stderr
    assert "weights loaded" not in result.stderr


def test_the_server_starts_when_every_checksum_matches(tiny_native, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_native, model)
    config = _operator_like_config(tmp_path, str(model), checksums.compute(model))
    server = start_server(tmp_path, {"CONFIG_FILE": config}, timeout=120)
    try:
        assert "file(s) verified" in server.log()
    finally:
        server.stop()
