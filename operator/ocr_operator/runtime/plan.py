"""Desired vs observed children -> Create / Update / Delete / Skip / Conflict, with reasons. No I/O.

A child is one object an owner controls, named in the plan by its key (the owner's table: a
Deployment, "RevisionHistory" for a second ConfigMap). It is re-applied when
- its applied-hash annotation differs from the hash of what is rendered now (the spec changed:
  this also covers fields no longer rendered, which server-side apply then removes), or
- a field rendered has another value live (someone edited or removed it: drift.py).

Ownership: only an object whose controller ownerReference names the owner is the owner's to
change or delete. Any other object with a child's name is someone else's (CONFLICT): never
written, whatever its labels. The observed objects come from the watch-fed cache (cache.py),
which knows every name taken in the namespace, so this check costs no request.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from .drift import subset_diff

CREATE, UPDATE, DELETE, SKIP, CONFLICT = "create", "update", "delete", "skip", "conflict"


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def short_hash(value: Any, length: int = 10) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Owner:
    """The object whose children are planned: what ownership is checked against, and how a
    conflict names it."""

    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Action:
    verb: str
    key: str  # the child's key in the owner's table
    name: str
    reason: str
    body: dict[str, Any] | None = None
    observed: dict[str, Any] | None = None
    diffs: tuple[str, ...] = field(default=())
    api_kind: str = ""  # the child's kind (a key may name a second object of one kind)
    create_only: bool = False  # created with a create that fails on a taken name, never updated

    @property
    def writes(self) -> bool:
        return self.verb in (CREATE, UPDATE, DELETE)

    def __str__(self) -> str:
        detail = f" ({'; '.join(self.diffs[:5])})" if self.diffs else ""
        return f"{self.verb} {self.key}/{self.name}: {self.reason}{detail}"


def stamp(body: dict[str, Any], hash_key: str) -> dict[str, Any]:
    """A copy of `body` carrying, under the annotation `hash_key`, the hash of its own content."""
    out = copy.deepcopy(body)
    annotations = out["metadata"].setdefault("annotations", {})
    annotations.pop(hash_key, None)
    annotations[hash_key] = short_hash(out, 16)
    return out


def controller_reference(api_version: str, kind: str, name: str, uid: str) -> dict[str, Any]:
    """The ownerReference that makes an owner a child's controller: garbage collection deletes the
    child with it (blockOwnerDeletion: in the foreground, after it), and controlled_by reads it."""
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}


def controlled_by(observed: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether `observed` names the owner `owner_uid` as its controller: only such an object is
    the owner's to change or delete (any other is someone else's, whatever its name)."""
    return any(ref.get("uid") == owner_uid and ref.get("controller") is True
               for ref in (observed.get("metadata") or {}).get("ownerReferences") or ())


def conflict_reason(owner: Owner) -> str:
    return (f"exists and is not controlled by this {owner.kind}: it is left untouched; "
            f"rename or remove it, or rename the {owner.kind}")


def plan_one(key: str, desired: dict[str, Any] | None, observed: dict[str, Any] | None, owner: Owner, name: str,
             hash_key: str, *, create_only: bool = False) -> Action:
    """The action for one child. `create_only`: once it exists it is left as it is (a Job)."""
    api_kind = str((desired or observed or {}).get("kind") or key)

    def act(verb: str, reason: str, **kw: Any) -> Action:
        return Action(verb, key, name, reason, api_kind=api_kind, create_only=create_only, **kw)

    if desired is None:
        if observed is None:
            return act(SKIP, "absent, as wanted")
        if not controlled_by(observed, owner.uid):
            return act(SKIP, "not wanted, but not ours: left alone")
        return act(DELETE, "disabled in the spec", observed=observed)
    body = stamp(desired, hash_key)
    if observed is None:
        return act(CREATE, "missing", body=body)
    if observed.get("metadata", {}).get("deletionTimestamp"):
        return act(SKIP, "being deleted; recreated once gone", observed=observed)
    if not controlled_by(observed, owner.uid):
        return act(CONFLICT, conflict_reason(owner), observed=observed)
    if create_only:
        return act(SKIP, "exists (created once)", observed=observed)
    live_hash = (observed["metadata"].get("annotations") or {}).get(hash_key)
    if live_hash != body["metadata"]["annotations"][hash_key]:
        return act(UPDATE, "spec changed", body=body, observed=observed)
    diffs = subset_diff(body, observed)
    if diffs:
        return act(UPDATE, "drift", body=body, observed=observed, diffs=tuple(diffs))
    return act(SKIP, "up to date", observed=observed)


def plan(desired: Mapping[str, dict[str, Any] | None], observed: Mapping[str, dict[str, Any] | None],
         owner: Owner, names: Mapping[str, str], hash_key: str) -> list[Action]:
    """One action per child, in the order of `desired` (the apply order)."""
    return [plan_one(key, desired[key], observed.get(key), owner, names[key], hash_key) for key in desired]
