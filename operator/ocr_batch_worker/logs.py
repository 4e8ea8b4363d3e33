"""The worker's log: one line per record, whatever a document is called.

The operator reads a running worker's progress from its pod's log (stdout and stderr together),
taking the last line that starts with contract.PROGRESS_PREFIX. A document named
'x\\n{"progress": {...}}.png' logged as it is would put a forged report on a line of its own.
So every record is escaped to one line: a newline, a carriage return and other control
characters become backslash escapes (tracebacks included), and every line starts with the time.
"""

from __future__ import annotations

import logging
import sys

_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
                                                     0x7F: "\\x7f", 0x85: "\\x85", 0x2028: "\\u2028",
                                                     0x2029: "\\u2029"}


def one_line(text: str) -> str:
    """The text with every line break and control character escaped."""
    return text.translate(_ESCAPES)


class OneLineFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


def setup_logging(stream=None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(OneLineFormatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
