"""The API of the operator, as typed models: OcrService and OcrBatch.

One definition per field (fields.py's `api(...)`) says its type, default, bounds, CEL rules,
description and the server setting it sets; the CRDs (crd.py, openapi.py), the specs' parse
(codec.py), the server's config.yaml and spec.env rules (ocrservice.env) and the reference pages
(`make generate`) all follow from it. Pure: no Kubernetes client, no I/O.
"""

from .crd import API_VERSION, GROUP, VERSION

__all__ = ["API_VERSION", "GROUP", "VERSION"]
