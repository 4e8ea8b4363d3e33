"""ENGINE=vllm: vLLM's AsyncLLM in the server process (imported only when ENGINE=vllm)."""
