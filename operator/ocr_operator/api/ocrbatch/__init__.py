"""The OcrBatch API: its typed models (spec and status) and kind.

`parse(spec)` reads a stored OcrBatch's spec into `OcrBatchSpec` with every default applied, so the
controller, the Job render and the worker's configuration read one typed value per field.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..codec import parse as _parse
from .batch import Callback, Limits, Location, OcrBatchSpec, Options, PvcLocation, S3Location, SecretKeyRef
from .kind import OCRBATCH
from .status import PHASES, OcrBatchStatus


def parse(spec: Mapping[str, Any]) -> OcrBatchSpec:
    """An OcrBatch's spec, typed and defaulted; SpecError names the field."""
    return _parse(OcrBatchSpec, spec)


__all__ = ["OCRBATCH", "PHASES", "Callback", "Limits", "Location", "OcrBatchSpec", "OcrBatchStatus", "Options",
           "PvcLocation", "S3Location", "SecretKeyRef", "parse"]
