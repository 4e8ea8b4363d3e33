"""The events a request yields, streamed or not: Started, then text Deltas, then Done with the response.

/v1/ocr and /v1/chat/completions, streamed or not, all consume these (service.stream); `ocr()` is
the last event's response.
"""

from __future__ import annotations

from dataclasses import dataclass

from .schema import OcrResponse


@dataclass(frozen=True)
class Started:
    """Admitted, decoded and queued: from here on errors arrive inside the stream."""


@dataclass(frozen=True)
class Delta:
    text: str


@dataclass(frozen=True)
class Done:
    response: OcrResponse


Event = Started | Delta | Done
