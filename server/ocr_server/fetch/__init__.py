"""`python -m ocr_server.fetch`: the weights from object storage, verified, into a cache.

The OcrService's `spec.model.source.s3` runs this program as the pod's `model-fetch` init container
(the server image, so no other image to pull). It downloads every object under s3://bucket/prefix
in ranged GETs (FETCH_CHUNK_BYTES each, FETCH_CONCURRENCY at a time), verifies each file's sha256 against the
checksum list (the OcrService's `spec.model.checksums`, rendered beside the server's config; else
`model-checksums.json` stored beside the weights, which is then required), publishes the directory
atomically into a cache keyed by the list's digest, and links the server's model directory to it.

- settings.py: the environment the init container gets, read and checked (pure);
- store.py: the bucket through one boto3 client (listing, ranged GETs on a thread pool, errors named);
- cache.py: the cache root (a node's hostPath shared by its pods, or the pod's emptyDir): keys,
  the per-key lock, staging and atomic publish, least-recently-used eviction;
- report.py: progress as JSON lines on stdout, the final reason in the termination message;
- waiting.py: S3 outages (no answer, a 5xx, throttling) waited out within FETCH_MAX_OUTAGE_SECONDS;
- fetcher.py: the run, bounded in objects, bytes, time, stalls and outages.

A failure ends the container with a termination message whose first word is the reason the operator
reads: `ModelFetchFailed` (the store refused, stalled, or could not be reached for longer than
the outage budget; a bound was passed)
or `ChecksumMismatch` (naming the file).
"""

from __future__ import annotations

FETCH_FAILED = "ModelFetchFailed"
CHECKSUM_MISMATCH = "ChecksumMismatch"
REASONS = (FETCH_FAILED, CHECKSUM_MISMATCH)


class FetchError(RuntimeError):
    """The fetch cannot finish; `reason` is one of REASONS, the message says why and names the file."""

    def __init__(self, reason: str, message: str) -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason
