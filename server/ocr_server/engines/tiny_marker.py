"""How the server recognises a tiny random model and labels what it serves from one.

Tests and the demo serve a model with randomly initialised weights (written by the separate
ocr-server-testing distribution, which imports these constants). Its README.md carries
TINY_MARKER; the server still serves it, but says at every turn that its text is meaningless:
a warning at load, the name and revision below in /health and the responses, `tiny: true`.
"""

from __future__ import annotations

from pathlib import Path

TINY_MARKER = "TINY RANDOM MODEL"
TINY_MODEL_NAME = "causalflow/tiny-random-deepseek-ocr2"
TINY_REVISION = "tiny-random (MEANINGLESS OUTPUT)"
TINY_SERVED_NAME = f"{TINY_MODEL_NAME} ({TINY_MARKER}, meaningless output)"


def is_tiny(model_dir: Path) -> bool:
    """True when the model directory's README.md says its weights are random."""
    readme = model_dir / "README.md"
    return readme.is_file() and TINY_MARKER in readme.read_text(errors="ignore")
