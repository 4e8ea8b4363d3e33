"""The OcrBatch API: its typed models (spec and status) and kind.

`parse(spec)` reads a stored OcrBatch's spec into `OcrBatchSpec` with every default applied, so the
controller, the Job render and the worker's configuration read one typed value per field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..codec import parse as _parse
from ..fields import fields_of
from .batch import Callback, Limits, Location, OcrBatchSpec, Options, PvcLocation, S3Location, SecretKeyRef
from .kind import OCRBATCH
from .status import PHASES, OcrBatchStatus


def parse(spec: Mapping[str, Any]) -> OcrBatchSpec:
    """An OcrBatch's spec, typed and defaulted; SpecError names the field."""
    return _parse(OcrBatchSpec, spec)


@dataclass(frozen=True)
class FieldBounds:
    """One bounded OcrBatch field, as the worker re-checks the configuration rendered from it."""

    spec_path: str
    default: Any
    minimum: int | None
    maximum: int | None
    choices: tuple[Any, ...]


def batch_setting(path: str) -> FieldBounds:
    """The default and bounds of the OcrBatch field at `path` under spec (limits.maxDocumentBytes),
    read from its model (KeyError for a path that is not a field)."""
    cls, f = OcrBatchSpec, None
    for part in path.split("."):
        f = next((x for x in fields_of(cls) if x.json == part), None)
        if f is None:
            raise KeyError(path)
        cls = f.type.cls
    a = f.api
    return FieldBounds(f"spec.{path}", a.default if a.has_default else None, a.minimum, a.maximum, a.enum)


__all__ = ["OCRBATCH", "PHASES", "Callback", "FieldBounds", "Limits", "Location", "OcrBatchSpec", "OcrBatchStatus", "Options",
           "PvcLocation", "S3Location", "SecretKeyRef", "batch_setting", "parse"]
