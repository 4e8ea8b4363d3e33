"""CausalFlow OCR operator: runs OcrService GPU inference services (kopf, level-based).

Never imports torch, transformers or the server package (import-linter contract).
"""

__version__ = "0.1.0"
