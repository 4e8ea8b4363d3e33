"""The engines: one typed protocol (api.py) and its two implementations.

- transformers/: transformers' native DeepSeek-OCR 2 (the reference), with the slots decoder;
- vllm/: vLLM's async engine in-process (lives in its own virtual environment).
Shared here: the crop plan, the page scheduler's class queue, the checkpoint's layout and
revision, streaming detokenization, and the warm-up. Engines know nothing of serving or HTTP.
"""
