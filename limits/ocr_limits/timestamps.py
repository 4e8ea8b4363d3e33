"""Timestamps as Kubernetes writes them: RFC 3339 in UTC, `Z` suffixed. Written once for every caller.

`iso` gives seconds (a condition's lastTransitionTime, a status time, a callback's createdAt);
`iso_micro` gives microseconds (a Lease's MicroTime). An aware time is converted to UTC; a naive
one is taken as UTC already (what datetime.utcnow() gives), never as the machine's local time.
`parse` reads either back (or a datetime, or nothing) as an aware time.
"""

from __future__ import annotations

import datetime as dt


def _utc(when: dt.datetime) -> dt.datetime:
    return when.replace(tzinfo=dt.timezone.utc) if when.tzinfo is None else when.astimezone(dt.timezone.utc)


def iso(when: dt.datetime) -> str:
    """2026-12-03T23:52:40Z"""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_micro(when: dt.datetime) -> str:
    """2026-12-03T23:52:40.123456Z"""
    return _utc(when).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(value: object) -> dt.datetime | None:
    """'2026-01-02T03:04:05Z' (with or without a fraction) -> an aware UTC-based datetime; None or '' -> None."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return _utc(value)
    text = str(value)
    parsed = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)
