"""A JSON object read from text the worker did not write (its configuration, a JSONL request line),
with its nesting bounded before the parser runs: json's C parser stops only at the interpreter's
recursion limit (a process-wide setting another library may have raised), as a RecursionError."""

from __future__ import annotations

import json
import re
from typing import Any

# A chat completion request nests about 6 deep (body.messages[].content[].image_url.url), the
# worker's configuration 3.
MAX_JSON_DEPTH = 64
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


class JsonTextError(ValueError):
    """Why the text is no JSON object, worded to follow its name: "line 3 is not JSON: ..."."""


def json_depth(text: str) -> int:
    """How deep the brackets of a JSON text nest, strings left out. The counts come first (C speed):
    a text with few brackets cannot nest deeper than their number."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def json_object(text: str | bytes) -> dict[str, Any]:
    """The JSON object `text` (bytes: UTF-8) holds; JsonTextError when it is not JSON, nests deeper
    than MAX_JSON_DEPTH, or holds another value."""
    try:
        text = text.decode() if isinstance(text, bytes) else text
    except UnicodeDecodeError as exc:
        raise JsonTextError(f"is not JSON: {exc}") from None
    if json_depth(text) > MAX_JSON_DEPTH:
        raise JsonTextError(f"is nested more than {MAX_JSON_DEPTH} deep")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise JsonTextError(f"is not JSON: {exc}") from None
    except RecursionError:  # deeper than the interpreter allows, past the bound's count: still this text's error
        raise JsonTextError("is nested too deeply to read") from None
    if not isinstance(value, dict):
        raise JsonTextError("is not a JSON object")
    return value
