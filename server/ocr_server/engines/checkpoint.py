"""A model directory: which checkpoint layout it holds, and the revision the server reports for it.

Most users download `deepseek-ai/DeepSeek-OCR-2` (the official, remote-code layout); the
transformers-native layout is what `python -m ocr_server.convert` writes. Both engines read this.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ..runtime.config import ConfigError, ServerConfig
from .tiny_marker import TINY_REVISION

NATIVE_MODEL_TYPE = "deepseek_ocr2"


def validate_model_dir(cfg: ServerConfig) -> Path:
    """The weights directory must exist and hold a config.json; named key in the message."""
    d = cfg.model.model_dir
    key = "MODEL_PATH" if cfg.model.path else "CACHE_DIR/MODEL_NAME"
    if not d.is_dir():
        raise ConfigError(f"{key}: weights directory {str(d)!r} does not exist (mount the model cache or set MODEL_PATH)")
    if not (d / "config.json").is_file():
        raise ConfigError(f"{key}: {str(d)!r} has no config.json; expected a DeepSeek-OCR-2 model directory")
    return d


def read_config_json(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    return json.loads(path.read_text())


def is_official_layout(config_dict: dict[str, Any]) -> bool:
    """True for the deepseek-ai upload (remote code), False for the transformers-native layout."""
    if config_dict.get("model_type") == NATIVE_MODEL_TYPE:
        return False
    return "language_config" in config_dict or "DeepseekOCR2ForCausalLM" in config_dict.get("architectures", [])


def revision(model_dir: Path, configured: str | None, tiny: bool) -> str:
    """What /health and the responses report: the configured revision, the tiny model's label, a
    `revision` file, the Hub cache's snapshot commit, or a hash of config.json."""
    if configured:
        return configured
    if tiny:
        return TINY_REVISION
    for name in ("revision", ".revision"):
        if (model_dir / name).is_file():
            return (model_dir / name).read_text().strip()[:64]
    # HF cache snapshots live in snapshots/<commit>/
    if model_dir.parent.name == "snapshots":
        return model_dir.name[:12]
    return "config-" + hashlib.sha256((model_dir / "config.json").read_bytes()).hexdigest()[:12]
