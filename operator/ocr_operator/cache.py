"""In-memory copies of the children and pods, fed by the watch streams kopf already keeps open.

A reconcile reads its snapshot from here instead of GETting every child (controller-runtime's
informer cache). Three sources feed it, all on the event loop's thread:

- the watch events (handlers.py), in the order the API server sends them for each resource;
- the operator's own writes: what an apply returns is stored at once ("write-through"), so the
  next reconcile sees it even before its watch event arrives;
- a miss in a namespace whose kinds were never listed is read once with a GET (``fetch``) and
  remembered, also when absent.

``resourceVersion`` is opaque (only compared for equality, as the API conventions ask), and kopf
coalesces a burst of events of one object into its latest, so the event of a given version may
never arrive. After the operator's own write the store keeps what the API server returned and
skips watch events that do not carry the applied-hash annotation it just wrote: they were sent
before the write. The first event with that hash (the write's own, or a later one) ends the
skipping, as does ``OWN_WRITE_SECONDS``. ``apply_event`` says whether an event brought news, which is
what wakes the owner's reconcile: the echo of the operator's own write does not, nor does a
change of only the status of a kind whose status no reconcile reads (``children.ApiKind.status_read``:
a PodDisruptionBudget's pod counts move with every pod, and drift is judged on what we render).

Objects are kept slim (``slim``): what a reconcile reads, without what it never does (other
managers' managedFields entries, a pod's spec), which is most of an object's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from . import children, naming

ObjKey = tuple[str, str, str]  # (kind, namespace, name)
OWN_WRITE_SECONDS = 30.0
DELETED = "<deleted>"


def rv(obj: Mapping[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


def applied_hash(obj: Mapping[str, Any] | None) -> str | None:
    """The hash of what the operator last applied to this object (plan.stamp)."""
    return (((obj or {}).get("metadata") or {}).get("annotations") or {}).get(naming.APPLIED_HASH_KEY)



def watched(obj: Mapping[str, Any]) -> bool:
    """Whether the label-filtered watches (and the start-up list) see `obj`."""
    labels = ((obj.get("metadata") or {}).get("labels") or {})
    return labels.get(naming.LABEL_MANAGED_BY) == naming.FIELD_MANAGER


def slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` holding what a reconcile reads: no managedFields (often most of an
    object's size; drift is found by comparing values, server-side apply tracks ownership);
    a pod without its spec (rollout.pod_view reads metadata and status only)."""
    out = dict(obj)
    md = out.get("metadata")
    if isinstance(md, Mapping) and "managedFields" in md:
        md = dict(md)
        del md["managedFields"]
        out["metadata"] = md
    if out.get("kind") == "Pod":
        out.pop("spec", None)
    return out


# Kinds whose status-only changes are no news (children.ApiKind.status_read).
STATUS_UNREAD = frozenset(k.kind for k in children.KINDS.values() if not k.status_read)


def _without_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` less its status and the metadata every write changes (slim objects have no managedFields)."""
    md = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": md}


def _status_only(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    return current is not None and _without_status(current) == _without_status(new)


def _generation(obj: Mapping[str, Any] | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("generation") or 0)


def _newer_or_same(current: Mapping[str, Any] | None, result: Mapping[str, Any]) -> bool:
    """Whether a watch event already delivered `current` from at or after our write `result`:
    it carries the hash we wrote and no older generation (a slow response can arrive after the
    events that followed it, e.g. the Deployment controller's status updates)."""
    return (current is not None and applied_hash(current) == applied_hash(result)
            and _generation(current) >= _generation(result))


@dataclass
class Store:
    """Objects by (kind, namespace, name); absent ones are remembered as None."""

    clock: Callable[[], float] = time.monotonic
    objects: dict[ObjKey, dict[str, Any] | None] = field(default_factory=dict)
    # (kind, namespace) pairs whose full label-selected list is known: a miss there means absent.
    listed: set[tuple[str, str | None]] = field(default_factory=set)
    _own: dict[ObjKey, tuple[str, float]] = field(default_factory=dict)
    pods: dict[tuple[str, str], dict[str, dict[str, Any]]] = field(default_factory=dict)
    _pod_groups: set[tuple[str, str]] = field(default_factory=set)

    # ------------------------------------------------------------------ reading
    def known(self, key: ObjKey) -> bool:
        kind, ns, _ = key
        return key in self.objects or (kind, ns) in self.listed or (kind, None) in self.listed

    def get(self, key: ObjKey) -> dict[str, Any] | None:
        return self.objects.get(key)

    def pods_of(self, namespace: str, instance: str) -> list[dict[str, Any]]:
        return list(self.pods.get((namespace, instance), {}).values())

    def pods_known(self, namespace: str, instance: str) -> bool:
        return ((namespace, instance) in self._pod_groups or ("Pod", namespace) in self.listed
                or ("Pod", None) in self.listed)

    def pods_listed(self, namespace: str, instance: str, items: list[Mapping[str, Any]]) -> None:
        """A LIST of one OcrService's pods on a miss (watch events that came first are kept)."""
        group = self.pods.setdefault((namespace, instance), {})
        for item in items:
            group.setdefault(item["metadata"]["name"], slim({**item, "kind": "Pod"}))
        self._pod_groups.add((namespace, instance))

    # ------------------------------------------------------------------ feeding
    def apply_event(self, event_type: str | None, obj: Mapping[str, Any]) -> bool:
        """One watch event; True when it changed what the store holds (so: wake the owner)."""
        md = obj.get("metadata") or {}
        key = (obj.get("kind") or "", md.get("namespace") or "", md.get("name") or "")
        if key[0] == "Pod":
            return self._apply_pod_event(event_type, obj)
        own = self._own.get(key)
        if event_type == "DELETED":
            self._own.pop(key, None)
            had = self.objects.get(key) is not None
            self.objects[key] = None
            return had
        current = self.objects.get(key)
        if current is not None and rv(current) == rv(obj) and rv(obj) is not None:
            return False  # the echo of our own write, or a re-list of what we hold
        if own is not None and event_type is not None and self.clock() - own[1] < OWN_WRITE_SECONDS:
            if own[0] == DELETED or applied_hash(obj) != own[0]:
                return False  # sent before our own write: we hold newer
        self._own.pop(key, None)
        obj = slim(obj)
        self.objects[key] = obj
        return not (key[0] in STATUS_UNREAD and _status_only(current, obj))

    def _apply_pod_event(self, event_type: str | None, obj: Mapping[str, Any]) -> bool:
        md = obj.get("metadata") or {}
        instance = (md.get("labels") or {}).get(naming.LABEL_INSTANCE)
        if not instance:
            return False
        group = self.pods.setdefault((md.get("namespace") or "", instance), {})
        name = md.get("name") or ""
        if event_type == "DELETED":
            return group.pop(name, None) is not None
        if name in group and rv(group[name]) == rv(obj):
            return False
        group[name] = slim(obj)
        return True

    def wrote(self, kind: str, namespace: str, name: str, result: Mapping[str, Any] | None) -> None:
        """The operator wrote this object; `result` is what the API server returned (None: deleted)."""
        key = (kind, namespace, name)
        if result is None:
            self.objects[key] = None
            self._own[key] = (DELETED, self.clock())
            return
        current = self.objects.get(key)
        if not _newer_or_same(current, result):
            self.objects[key] = slim(result)
        self._own[key] = (applied_hash(result) or "", self.clock())

    def fetched(self, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        """A GET on a miss: remember the answer unless a watch event got there first. An object
        without the managed-by label (someone else's, with a child's name) is not remembered:
        the label-filtered watch would never tell its change or removal."""
        if key in self.objects:
            return
        if obj is None:
            self.objects[key] = None
        elif watched(obj):
            self.objects[key] = slim(obj)

    def mark_listed(self, kind: str, namespace: str | None, items: list[Mapping[str, Any]]) -> None:
        for item in items:
            item = {**item, "kind": item.get("kind") or kind}
            self.apply_event(None, item)
        self.listed.add((kind, namespace))

    def forget(self, namespace: str, instance: str, names: Mapping[str, str], kinds: Mapping[str, str]) -> None:
        """An OcrService is gone: drop what it owned (garbage collection deletes it)."""
        for key, name in names.items():
            obj_key = (kinds[key], namespace, name)
            self.objects.pop(obj_key, None)
            self._own.pop(obj_key, None)
        self.pods.pop((namespace, instance), None)
        self._pod_groups.discard((namespace, instance))
