"""The serving layer: one OCR request from bytes and options to a typed response.

Admission and request classes, the result cache, documents to pages (images, PDF, TIFF), page
splitting, prompts, grounded output, golden pages and the request's events. It talks to an engine
only through the engine protocol (engines.api) and knows nothing of HTTP.
"""
