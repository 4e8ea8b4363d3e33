"""Drift: where a live object does not carry what the operator rendered for it. No I/O.

Only the fields rendered are compared: live objects carry defaults and fields owned by others
(the API server's clusterIP, the HPA's status), and the API server rewrites quantities to a
canonical form. Diffs are logged, so env values are never shown (often tokens or passwords).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX = {None: 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
           "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def parse_quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity as a number, or None when it is not one (the API server rewrites
    quantities to a canonical form: '0.5' comes back as '500m')."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str):
        return None
    m = _QUANTITY.match(value.strip())
    if not m:
        return None
    try:
        return Decimal(m.group(1)) * Decimal(_SUFFIX[m.group(2)])
    except InvalidOperation:
        return None


def _equal_scalar(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if want == have:
        return True
    if isinstance(want, (int, str)) and isinstance(have, (int, str)):
        a, b = parse_quantity(want), parse_quantity(have)
        return a is not None and a == b
    return False


def _keyed(items: list[Any]) -> str | None:
    for key in ("name", "mountPath", "containerPort"):
        if items and all(isinstance(i, dict) and key in i for i in items):
            return key
    return None


REDACTED = "<redacted>"


def _shown(path: str, value: Any) -> str:
    """A value as a drift diff shows it (diffs are logged): none under an env list, where a
    literal value is often a token or a password; the path still names the variable."""
    return REDACTED if ".env[" in path else repr(value)


def subset_diff(want: Any, have: Any, path: str = "") -> list[str]:
    """Paths where `have` (live) does not carry what `want` (rendered) says (env values redacted)."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [] if not want and have is None else [f"{path or '.'}: missing"]
        out: list[str] = []
        for key, value in want.items():
            sub = f"{path}.{key}"
            if key not in have or have[key] is None:
                if value in ({}, [], None):
                    continue
                out.append(f"{sub}: missing")
            else:
                out += subset_diff(value, have[key], sub)
        return out
    if isinstance(want, list):
        if not isinstance(have, list):
            return [] if not want and have is None else [f"{path}: missing"]
        key = _keyed(want)
        if key is not None and isinstance(have, list) and all(isinstance(i, dict) for i in have):
            live = {i.get(key): i for i in have}
            out = []
            for item in want:
                if item[key] not in live:
                    out.append(f"{path}[{key}={item[key]}]: missing")
                else:
                    out += subset_diff(item, live[item[key]], f"{path}[{key}={item[key]}]")
            # Order matters for env (later entries can reference earlier ones) and containers.
            order = [i.get(key) for i in have if i.get(key) in {w[key] for w in want}]
            if not out and order != [w[key] for w in want]:
                out.append(f"{path}: order")
            return out
        if len(want) != len(have):
            return [f"{path}: {len(have)} items, want {len(want)}"]
        out = []
        for i, (w, h) in enumerate(zip(want, have)):
            out += subset_diff(w, h, f"{path}[{i}]")
        return out
    return [] if _equal_scalar(want, have) else [f"{path}: {_shown(path, have)} != {_shown(path, want)}"]
