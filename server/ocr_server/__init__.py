"""CausalFlow OCR server: DeepSeek-OCR-2 behind HTTP, with dynamic batching."""

__version__ = "0.1.0"
