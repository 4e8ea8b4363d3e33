"""The OcrBatch limits and defaults: its typed API model (and so its CRD) takes them from here.

An OcrBatch turns a folder of documents into text with an Indexed Job of workers. Every input it
takes is bounded here once: the Job's size (indices, pages in flight per worker), its time (the
deadline), and each document (bytes, pages), so the API server refuses a batch that asks for more
and the worker, which reads the same numbers, never holds more than one document of that size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .prompts import MODES
from .settings import setting

Scalar = Union[int, str, bool]

MAX_NEW_TOKENS = setting("MAX_NEW_TOKENS").maximum  # the model's context: 8192

MAX_PARALLELISM = 64  # Job indices (worker pods), each a shard of the input
MAX_CONCURRENCY = 64  # pages one worker has in flight
MIN_DEADLINE_SECONDS = 60
MAX_DEADLINE_SECONDS = 7 * 24 * 3600
MAX_DOCUMENT_BYTES = 1024 * 1024 * 1024  # 1 GiB: the worker holds one document in memory per slot
DEFAULT_DOCUMENT_BYTES = 100 * 1024 * 1024
MAX_PAGES_PER_DOCUMENT = 10_000
DEFAULT_PAGES_PER_DOCUMENT = 1_000
MAX_DOCUMENTS = 1_000_000  # the input listing is read whole (names and sizes) by every worker
DEFAULT_DOCUMENTS = 100_000
DEFAULT_STORAGE_RETRY_SECONDS = 600  # an outage of the input or output a worker waits out
MAX_STORAGE_RETRY_SECONDS = 24 * 3600
# A running worker whose progress has not moved this long is restarted (the operator's stall rule).
# The floor is the operator's log-read interval: a shorter one could not be told from silence.
DEFAULT_STALL_SECONDS = 600
MIN_STALL_SECONDS = 10
MAX_STALL_SECONDS = 24 * 3600
MAX_TTL_SECONDS = 365 * 24 * 3600  # an ended batch deleted at most a year after its end


@dataclass(frozen=True)
class BatchSetting:
    """One bounded OcrBatch field: its path under spec, default and bounds."""

    field: str
    default: Scalar | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[Scalar, ...] = ()

    @property
    def spec_path(self) -> str:
        return f"spec.{self.field}"


BATCH_SETTINGS: tuple[BatchSetting, ...] = (
    BatchSetting("options.mode", None, choices=MODES),  # the server's prompt modes (ocr_limits.prompts)
    BatchSetting("options.maxNewTokens", None, 1, MAX_NEW_TOKENS),
    BatchSetting("parallelism", 1, 1, MAX_PARALLELISM),
    BatchSetting("concurrencyPerWorker", 4, 1, MAX_CONCURRENCY),
    BatchSetting("deadlineSeconds", None, MIN_DEADLINE_SECONDS, MAX_DEADLINE_SECONDS),
    BatchSetting("stallSeconds", DEFAULT_STALL_SECONDS, MIN_STALL_SECONDS, MAX_STALL_SECONDS),
    BatchSetting("ttlSecondsAfterFinished", None, 0, MAX_TTL_SECONDS),
    BatchSetting("limits.maxDocumentBytes", DEFAULT_DOCUMENT_BYTES, 1, MAX_DOCUMENT_BYTES),
    BatchSetting("limits.maxPagesPerDocument", DEFAULT_PAGES_PER_DOCUMENT, 1, MAX_PAGES_PER_DOCUMENT),
    BatchSetting("limits.maxDocuments", DEFAULT_DOCUMENTS, 1, MAX_DOCUMENTS),
    BatchSetting("limits.storageRetrySeconds", DEFAULT_STORAGE_RETRY_SECONDS, 0, MAX_STORAGE_RETRY_SECONDS),
)
BATCH_SETTING = {s.field: s for s in BATCH_SETTINGS}


def batch_setting(field: str) -> BatchSetting:
    """The bounded OcrBatch field at `field` (a path under spec, e.g. limits.maxDocumentBytes)."""
    return BATCH_SETTING[field]
