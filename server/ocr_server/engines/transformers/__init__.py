"""ENGINE=transformers: the engine, the slots decoder and its runner, grouped experts, the n-gram
guards, min-tokens, on-device pixel normalisation, and the official checkpoint's translation."""
