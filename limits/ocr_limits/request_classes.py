"""Request classes: the header a request names its class in, and the classes, in serving order.

The server serves `interactive` requests before `batch` ones and sheds batch ones first; the
OcrBatch worker sends every request as `batch`. Pure data.
"""

from __future__ import annotations

HEADER = "X-Request-Class"
INTERACTIVE, BATCH = "interactive", "batch"
CLASSES = (INTERACTIVE, BATCH)  # in the order they are served
