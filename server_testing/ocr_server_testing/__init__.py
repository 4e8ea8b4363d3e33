"""Test helpers for the OCR server, kept out of the product: the server's distribution and its
production image do not contain them, and no product module imports them.

- tiny_model: writes a tiny, randomly initialised DeepSeek-OCR-2 of the real architecture (tests,
  the demo, the image that bakes in a model);
- official_layout: native weights renamed to the official upload's keys (the inverse of what the
  server does at load), for writing that layout;
- stand_in: the real server app around an engine that only sleeps, for timing tests.
"""
