"""What can go wrong, by what it stops: one document, or the whole worker.

A document's failure (DocumentError, or any other exception while it is read, split, decoded or
sent) becomes that document's entry in the errors file and the worker goes on: one bad file must
not end a shard. Only these stop the worker, each with its exit status (contract.py):
FatalError (every further document would fail alike: configuration, the input unlistable,
credentials refused, the output unwritable), and storage that stayed unavailable past its budget
(patience.StorageUnavailable), which a new pod may find working again.
"""

from __future__ import annotations

from . import contract
from .storage import AccessRefused, LocationNotFound, StoreError


class DocumentError(Exception):
    """The document (or one page or line of it) cannot be read; str() is the reason."""


class FatalError(Exception):
    """Every further request would fail the same way: stop the worker. `reason`, when known, is one
    of contract.FATAL_REASONS: the word the operator puts in the batch's Failed condition."""

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


def input_unlistable(exc: StoreError) -> FatalError:
    """The worker's check of its input at start (its first listing) failed for good: the fatal
    error that ends the index, its reason by what the storage said (a missing directory, bucket or
    prefix; refused credentials; anything else). The message is the store's: it names the location
    and the endpoint, never a credential (s3.S3Store._error)."""
    if isinstance(exc, LocationNotFound):
        reason = contract.INPUT_NOT_FOUND
    elif isinstance(exc, AccessRefused):
        reason = contract.INPUT_CREDENTIALS_REJECTED
    else:
        reason = contract.INPUT_UNREADABLE
    return FatalError(f"the input cannot be listed: {exc}", reason)


def reason(exc: BaseException) -> str:
    """An unexpected exception as an errors-file reason: its type and message, bounded."""
    text = str(exc)
    if isinstance(exc, RecursionError):
        text = "nested too deeply to read"
    return f"{type(exc).__name__}: {text}"[:1000] if text else type(exc).__name__
