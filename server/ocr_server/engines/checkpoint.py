"""A model directory: which checkpoint layout it holds, and the revision the server reports for it.

Most users download `deepseek-ai/DeepSeek-OCR-2` (the official, remote-code layout); the
transformers-native layout is what `python -m ocr_server.convert` writes. Both engines read this.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .tiny_marker import TINY_REVISION

NATIVE_MODEL_TYPE = "deepseek_ocr2"


def read_config_json(model_dir: str | Path) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    return json.loads(path.read_text())


def is_official_layout(config_dict: dict[str, Any]) -> bool:
    """True for the deepseek-ai upload (remote code), False for the transformers-native layout."""
    if config_dict.get("model_type") == NATIVE_MODEL_TYPE:
        return False
    return "language_config" in config_dict or "DeepseekOCR2ForCausalLM" in config_dict.get("architectures", [])


def revision(model_dir: Path, configured: str | None, tiny: bool) -> str:
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
