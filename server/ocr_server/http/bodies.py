"""Request bodies and options decoded without ambiguity: pure functions, no I/O.

A reviewer of an upload API sends the same field twice (in a JSON object, a form, the query string,
or the form and the query string at once), JSON nested thousands deep, integers of thousands of
digits, bytes that are not UTF-8. Each gets a 400/422 naming what is wrong, never a guess (which
duplicate wins) and never a 500 (json's RecursionError, int's digit limit).
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from ..runtime.errors import BadInput, InvalidOptions


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadInput(f"the JSON body has the field {key[:64]!r} more than once", param=key[:64])
        out[key] = value
    return out


def parse_json(body: bytes) -> Any:
    """The JSON value of `body`; BadInput for invalid JSON (UTF-8, RFC 8259), a key given twice in
    one object, nesting deeper than Python's recursion allows (about 1,000 levels) or a number
    beyond Python's 4,300-digit limit."""
    try:
        return json.loads(body, object_pairs_hook=_no_duplicates)
    except RecursionError:
        raise BadInput("the JSON body is nested too deeply") from None
    except UnicodeDecodeError:
        raise BadInput("the body is not valid JSON: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # int("9" * 5000): more digits than Python converts
        raise BadInput(f"the body is not valid JSON: {exc}") from None


def single_options(**sources: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Options from each named source (form, query), each given once in all of them; else a 422
    naming the option and where it came from."""
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for where, pairs in sources.items():
        for key, value in pairs:
            if key in seen:
                again = f"twice in the {where}" if seen[key] == where else f"in both the {seen[key]} and the {where}"
                raise InvalidOptions(f"{key}: given {again}; send each option once", param=key)
            seen[key] = where
            out[key] = value
    return out
