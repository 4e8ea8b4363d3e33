"""In-memory copies of what the controllers own, fed by the watch streams kopf already keeps open.

A reconcile reads its snapshot from here instead of GETting every child (controller-runtime's
informer cache). Three sources feed it, all on the event loop's thread:

- the watch events, in the order the API server sends them for each resource;
- the operator's own writes: what an apply returns is stored at once ("write-through"), so the
  next reconcile sees it even before its watch event arrives;
- a miss in a namespace whose kinds were never listed is read once with a GET (``fetch``) and
  remembered, also when absent.

Kinds the operator creates with server-side apply (``ApiKind.owned``) are watched unfiltered, so
the cache knows every name taken in a listed namespace: an object of someone else (no managed-by
label) is kept as its metadata only (``stub``), enough for the apply's ownership check to refuse
it, never its data. Other kinds (pods, Jobs, ReplicaSets) are watched by the managed-by label; a
kind read for who controls it only (``ApiKind.metadata_only``: ReplicaSets) is kept as its stub.

``resourceVersion`` is opaque (only compared for equality, as the API conventions ask), and kopf
coalesces a burst of events of one object into its latest, so the event of a given version may
never arrive. After the operator's own write the store keeps what the API server returned and
skips watch events that do not carry the applied-hash annotation it just wrote: they were sent
before the write. The first event with that hash (the write's own, or a later one) ends the
skipping, as does ``OWN_WRITE_SECONDS``. ``apply_event`` says whether an event brought news, which is
what wakes the owner's reconcile: the echo of the operator's own write does not, nor does a
change of only the status of a kind whose status no reconcile reads (``ApiKind.status_read``:
a PodDisruptionBudget's pod counts move with every pod, and drift is judged on what we render),
nor anything of someone else's object.

Objects are kept slim (``slim``): what a reconcile reads, without what it never does (other
managers' managedFields entries, a pod's spec), which is most of an object's size. Pods are also
grouped by the labels that name their owner (``group_labels``), so a snapshot reads one owner's
pods without scanning all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .identity import Identity
from .kinds import ApiKind

ObjKey = tuple[str, str, str]  # (kind, namespace, name)
GroupKey = tuple[str, str, str]  # (label, namespace, value)
OWN_WRITE_SECONDS = 30.0
DELETED = "<deleted>"
POD = "Pod"
STUB_METADATA = ("name", "namespace", "uid", "resourceVersion", "ownerReferences", "deletionTimestamp", "labels")


def rv(obj: Mapping[str, Any] | None) -> str | None:
    return ((obj or {}).get("metadata") or {}).get("resourceVersion")


def slim(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `obj` holding what a reconcile reads: no managedFields (often most of an
    object's size; drift is found by comparing values, server-side apply tracks ownership);
    a pod without its spec (the rollout reads a pod's metadata and status only)."""
    out = dict(obj)
    md = out.get("metadata")
    if isinstance(md, Mapping) and "managedFields" in md:
        md = dict(md)
        del md["managedFields"]
        out["metadata"] = md
    if out.get("kind") == POD:
        out.pop("spec", None)
    return out


def stub(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Someone else's object as the cache keeps it: its kind and the metadata an ownership check
    reads (who controls it, whether it is being deleted), none of its data."""
    md = obj.get("metadata") or {}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
            "metadata": {k: md[k] for k in STUB_METADATA if k in md}}


def _without_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    """`obj` less its status and the metadata every write changes (slim objects have no managedFields)."""
    md = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in ("resourceVersion", "managedFields")}
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": md}


def _status_only(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    return current is not None and _without_status(current) == _without_status(new)


def _generation(obj: Mapping[str, Any] | None) -> int:
    return int(((obj or {}).get("metadata") or {}).get("generation") or 0)


@dataclass
class Store:
    """Objects by (kind, namespace, name); absent ones are remembered as None. `kinds`: the watched
    kinds (which are owned, whose status is read); `group_labels`: the labels pods are grouped by."""

    identity: Identity
    kinds: Iterable[ApiKind] = ()
    group_labels: tuple[str, ...] = ()
    clock: Callable[[], float] = time.monotonic
    objects: dict[ObjKey, dict[str, Any] | None] = field(default_factory=dict)
    # (kind, namespace) pairs whose full list is known: a miss there means absent.
    listed: set[tuple[str, str | None]] = field(default_factory=set)
    _own: dict[ObjKey, tuple[str, float]] = field(default_factory=dict)
    pods: dict[GroupKey, dict[str, dict[str, Any]]] = field(default_factory=dict)
    _pod_groups: set[GroupKey] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.kinds = tuple(self.kinds)
        self.owned = frozenset(k.kind for k in self.kinds if k.owned)
        self.status_unread = frozenset(k.kind for k in self.kinds if not k.status_read)
        self.metadata_only = frozenset(k.kind for k in self.kinds if k.metadata_only)

    # ------------------------------------------------------------------ reading
    def known(self, key: ObjKey) -> bool:
        kind, ns, _ = key
        return key in self.objects or (kind, ns) in self.listed or (kind, None) in self.listed

    def get(self, key: ObjKey) -> dict[str, Any] | None:
        return self.objects.get(key)

    def pods_of(self, namespace: str, label: str, value: str) -> list[dict[str, Any]]:
        return list(self.pods.get((label, namespace, value), {}).values())

    def pods_known(self, namespace: str, label: str, value: str) -> bool:
        return ((label, namespace, value) in self._pod_groups or (POD, namespace) in self.listed
                or (POD, None) in self.listed)

    def pods_listed(self, namespace: str, label: str, value: str, items: list[Mapping[str, Any]]) -> None:
        """A LIST of one owner's pods on a miss (watch events that came first are kept)."""
        group = self.pods.setdefault((label, namespace, value), {})
        for item in items:
            group.setdefault(item["metadata"]["name"], slim({**item, "kind": POD}))
        self._pod_groups.add((label, namespace, value))

    # ------------------------------------------------------------------ feeding
    def _kept(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """What the cache keeps of `obj`: the operator's own in full (slim), someone else's, and
        any of a kind read for its metadata only (``ApiKind.metadata_only``), as a stub."""
        if self.identity.manages(obj) and obj.get("kind") not in self.metadata_only:
            return slim(obj)
        return stub(obj)

    def apply_event(self, event_type: str | None, obj: Mapping[str, Any]) -> bool:
        """One watch event; True when it changed what the store holds of the operator's objects
        (so: wake the owner)."""
        md = obj.get("metadata") or {}
        key = (obj.get("kind") or "", md.get("namespace") or "", md.get("name") or "")
        if key[0] == POD:
            return self._apply_pod_event(event_type, obj)
        own = self._own.get(key)
        current = self.objects.get(key)
        if event_type == "DELETED":
            self._own.pop(key, None)
            self.objects[key] = None
            return current is not None and self.identity.manages(current)
        if current is not None and rv(current) == rv(obj) and rv(obj) is not None:
            return False  # the echo of our own write, or a re-list of what we hold
        if own is not None and event_type is not None and self.clock() - own[1] < OWN_WRITE_SECONDS:
            if own[0] == DELETED or self.identity.applied_hash(obj) != own[0]:
                return False  # sent before our own write: we hold newer
        self._own.pop(key, None)
        kept = self._kept(obj)
        self.objects[key] = kept
        if not self.identity.manages(kept):
            return current is not None and self.identity.manages(current)  # ours no more: news
        return not (key[0] in self.status_unread and _status_only(current, kept))

    def _apply_pod_event(self, event_type: str | None, obj: Mapping[str, Any]) -> bool:
        md = obj.get("metadata") or {}
        labels = md.get("labels") or {}
        name = md.get("name") or ""
        news = False
        for label in self.group_labels:
            value = labels.get(label)
            if not value:
                continue
            group = self.pods.setdefault((label, md.get("namespace") or "", value), {})
            if event_type == "DELETED":
                news = group.pop(name, None) is not None or news
            elif name not in group or rv(group[name]) != rv(obj):
                group[name] = slim({**obj, "kind": POD})
                news = True
        return news

    def wrote(self, kind: str, namespace: str, name: str, result: Mapping[str, Any] | None) -> None:
        """The operator wrote this object; `result` is what the API server returned (None: deleted)."""
        key = (kind, namespace, name)
        if result is None:
            self.objects[key] = None
            self._own[key] = (DELETED, self.clock())
            return
        current = self.objects.get(key)
        applied = self.identity.applied_hash(result)
        # A watch event may have delivered this write, or a later state, already (a slow response
        # can arrive after the events that followed it, e.g. the Deployment controller's status).
        if not (current is not None and self.identity.applied_hash(current) == applied
                and _generation(current) >= _generation(result)):
            self.objects[key] = slim({**result, "kind": kind})
        self._own[key] = (applied or "", self.clock())

    def fetched(self, key: ObjKey, obj: Mapping[str, Any] | None) -> None:
        """A GET on a miss: remember the answer unless a watch event got there first. Someone
        else's object of a kind watched by label only is not remembered: no watch event would
        tell its change or removal; but of a kind read for who controls it only (a ReplicaSet
        that a pod names) its stub is, so that a pod naming it costs one GET, not one a
        reconcile (a change the label-filtered watch does not tell leaves it someone else's)."""
        if key in self.objects:
            return
        if obj is None:
            self.objects[key] = None
        elif self.identity.manages(obj) or key[0] in self.owned or key[0] in self.metadata_only:
            self.objects[key] = self._kept({**obj, "kind": key[0]})

    def mark_listed(self, kind: str, namespace: str | None, items: list[Mapping[str, Any]]) -> None:
        for item in items:
            self.apply_event(None, {**item, "kind": item.get("kind") or kind})
        self.listed.add((kind, namespace))

    def drop_kind(self, kind: str) -> None:
        """`kind` is served no more (an optional CRD was deleted) or served again: forget every
        object of it and every list of it. The watch that fed it ended with its API, so what
        is held is no longer told when it changes or goes (the API server deletes a CRD's
        objects with it); until the watch starts again, a read of it is one GET."""
        for key in [k for k in self.objects if k[0] == kind]:
            del self.objects[key]
        for key in [k for k in self._own if k[0] == kind]:
            del self._own[key]
        self.listed = {(k, ns) for k, ns in self.listed if k != kind}

    def forget(self, namespace: str, objects: Iterable[tuple[str, str]], group: tuple[str, str]) -> None:
        """An owner is gone: drop what it owned, (kind, name) pairs and its pods grouped by
        `group` (label, value); garbage collection deletes them."""
        for kind, name in objects:
            self.objects.pop((kind, namespace, name), None)
            self._own.pop((kind, namespace, name), None)
        key = (group[0], namespace, group[1])
        self.pods.pop(key, None)
        self._pod_groups.discard(key)
