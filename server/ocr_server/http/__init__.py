"""The HTTP layer: the FastAPI app, its routes (/v1/ocr, the OpenAI-compatible API, health, metrics,
golden pages), the API's own models, server-sent events, and uvicorn with bounded connections.

Routes are thin: they read and bound a request, call the serving layer, and map its errors
(errors.py). Imports go downward only: serving, engines (the protocol), runtime.
"""
