"""The quality gate's reference-free criteria: the share of the gate's pages the server reports
as looping, truncated or empty (its page outcomes, server/ocr_server/serving/outcome.py), against
spec.rollout.qualityGate.maxLoopRate / maxTruncatedRate / maxEmptyRate. Pure.

A rate is the pages with that outcome over the pages whose outcome the server reported (a server
that reports none, an older image, leaves the criterion unjudged and says so). A page of several
(a PDF golden page) takes its worst page's outcome: loop, truncated, empty, ok.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

LOOP, TRUNCATED, EMPTY, OK = "loop", "truncated", "empty", "ok"
SEVERITY = (LOOP, TRUNCATED, EMPTY, OK)
# (outcome, the criterion's field on QualityGate, its name in the spec)
CRITERIA = ((LOOP, "max_loop_rate", "maxLoopRate"), (TRUNCATED, "max_truncated_rate", "maxTruncatedRate"),
            (EMPTY, "max_empty_rate", "maxEmptyRate"))
MAX_NAMED = 3  # pages named in a message


class Judged(Protocol):
    page: str
    outcome: str | None


def answer_outcome(pages: Any) -> str | None:
    """The outcome of one answer (POST /v1/ocr's JSON `pages`): the worst of its pages', None
    when no page carries one."""
    found = [p.get("outcome") for p in pages if isinstance(p, dict)] if isinstance(pages, list) else []
    known = {o for o in found if o in SEVERITY}
    return next((o for o in SEVERITY if o in known), None)


def _names(pages: Sequence[str]) -> str:
    more = len(pages) - MAX_NAMED
    return ", ".join(pages[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def judge_rates(outputs: Iterable[Judged], gate: Any) -> tuple[str | None, str]:
    """(the first failed criterion's message, starting with its name, or None; a summary of the
    judged rates, '' when no criterion is set)."""
    outputs = tuple(outputs)
    set_ = [(o, field, name, getattr(gate, field)) for o, field, name in CRITERIA if getattr(gate, field, None) is not None]
    if not set_:
        return None, ""
    known = [o for o in outputs if o.outcome is not None]
    if not known:
        return None, f"outcome rates not judged: the server reported no page outcome ({len(outputs)} pages)"
    parts, failed = [], None
    for outcome, _, name, limit in set_:
        hit = sorted(o.page for o in known if o.outcome == outcome)
        rate = round(len(hit) / len(known), 4)
        parts.append(f"{outcome} rate {rate:.4f} ({name} {limit:g})")
        if failed is None and rate > limit:
            failed = (f"{name}: {outcome} rate {rate:.4f} > {limit:g} ({len(hit)} of {len(known)} pages "
                      f"{outcome}: {_names(hit)})")
    return failed, "; ".join(parts)
