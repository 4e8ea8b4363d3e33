"""Shared builders for the operator's unit tests (no cluster, no I/O)."""

from __future__ import annotations

import copy
from typing import Any

from ocr_operator import spec as spec_mod


def owner(spec: dict[str, Any] | None = None, *, name: str = "ocr", namespace: str = "team-a",
          uid: str = "11111111-2222-3333-4444-555555555555", generation: int = 1,
          status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ocr.causalflow.dev/v1alpha1",
        "kind": "OcrService",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": {"image": "registry.example/ocr-server:1.0", **(spec or {})},
    }
    if status is not None:
        body["status"] = status
    return body


def parsed(body: dict[str, Any]) -> spec_mod.OcrServiceSpec:
    return spec_mod.parse(copy.deepcopy(body["spec"]))
