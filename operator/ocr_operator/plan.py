"""Desired vs observed children -> Create / Update / Delete / Skip, with reasons. No I/O.

Only the fields we render are compared: live objects carry defaults and fields owned by others
(the API server's clusterIP, the HPA's status). A child is re-applied when
- its applied-hash annotation differs from the hash of what we render now (our spec changed:
  this also covers fields we stopped rendering, which server-side apply then removes), or
- a field we render has another value live (someone edited or removed it: drift).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Mapping

from . import naming

CREATE, UPDATE, DELETE, SKIP, CONFLICT = "create", "update", "delete", "skip", "conflict"
CONFLICT_REASON = ("exists and is not controlled by this OcrService: it is left untouched; "
                   "rename or remove it, or rename the OcrService")


@dataclass(frozen=True)
class Action:
    verb: str
    kind: str
    name: str
    reason: str
    body: dict[str, Any] | None = None
    observed: dict[str, Any] | None = None
    diffs: tuple[str, ...] = field(default=())

    @property
    def writes(self) -> bool:
        return self.verb in (CREATE, UPDATE, DELETE)

    def __str__(self) -> str:
        detail = f" ({'; '.join(self.diffs[:5])})" if self.diffs else ""
        return f"{self.verb} {self.kind}/{self.name}: {self.reason}{detail}"


def stamp(body: dict[str, Any]) -> dict[str, Any]:
    """A copy of `body` carrying the applied-hash annotation of its own content."""
    out = copy.deepcopy(body)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations.pop(naming.APPLIED_HASH_KEY, None)
    digest = naming.short_hash(out, 16)
    annotations[naming.APPLIED_HASH_KEY] = digest
    return out


def controlled_by(observed: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether `observed` names the OcrService `owner_uid` as its controller: only such an
    object is ours to change or delete (any other is someone else's, whatever its name)."""
    return any(ref.get("uid") == owner_uid and ref.get("controller") is True
               for ref in (observed.get("metadata") or {}).get("ownerReferences") or ())


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


def plan_one(kind: str, desired: dict[str, Any] | None, observed: dict[str, Any] | None,
             owner_uid: str, name: str) -> Action:
    if desired is None:
        if observed is None:
            return Action(SKIP, kind, name, "absent, as wanted")
        if not controlled_by(observed, owner_uid):
            return Action(SKIP, kind, name, "not wanted, but not ours: left alone")
        return Action(DELETE, kind, name, "disabled in the spec", observed=observed)
    body = stamp(desired)
    if observed is None:
        return Action(CREATE, kind, name, "missing", body=body)
    if observed.get("metadata", {}).get("deletionTimestamp"):
        return Action(SKIP, kind, name, "being deleted; recreated once gone", observed=observed)
    if not controlled_by(observed, owner_uid):
        return Action(CONFLICT, kind, name, CONFLICT_REASON, observed=observed)
    live_hash = (observed["metadata"].get("annotations") or {}).get(naming.APPLIED_HASH_KEY)
    want_hash = body["metadata"]["annotations"][naming.APPLIED_HASH_KEY]
    if live_hash != want_hash:
        return Action(UPDATE, kind, name, "spec changed", body=body, observed=observed)
    diffs = subset_diff(body, observed)
    if diffs:
        return Action(UPDATE, kind, name, "drift", body=body, observed=observed, diffs=tuple(diffs))
    return Action(SKIP, kind, name, "up to date", observed=observed)


def plan(desired: Mapping[str, dict[str, Any] | None], observed: Mapping[str, dict[str, Any] | None],
         owner_uid: str, names: Mapping[str, str]) -> list[Action]:
    """One action per kind, in the order of `desired` (the apply order)."""
    return [plan_one(kind, desired[kind], observed.get(kind), owner_uid, names[kind]) for kind in desired]
