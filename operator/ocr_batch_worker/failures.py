"""What can go wrong, by what it stops: one document, or the whole worker.

A document's failure (DocumentError, or any other exception while it is read, split, decoded or
sent) becomes that document's entry in the errors file and the worker goes on: one bad file must
not end a shard. Only these stop the worker, each with its exit status (contract.py):
FatalError (every further document would fail alike: configuration, the input unlistable,
credentials refused, the output unwritable), and storage that stayed unavailable past its budget
(patience.StorageUnavailable), which a new pod may find working again.
"""

from __future__ import annotations


class DocumentError(Exception):
    """The document (or one page or line of it) cannot be read; str() is the reason."""


class FatalError(Exception):
    """Every further request would fail the same way: stop the worker."""


def reason(exc: BaseException) -> str:
    """An unexpected exception as an errors-file reason: its type and message, bounded."""
    text = str(exc)
    if isinstance(exc, RecursionError):
        text = "nested too deeply to read"
    return f"{type(exc).__name__}: {text}"[:1000] if text else type(exc).__name__
