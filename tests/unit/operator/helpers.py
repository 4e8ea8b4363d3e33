"""Shared builders for the operator's unit tests (no cluster, no I/O)."""

from __future__ import annotations

import copy
import datetime as dt
import itertools
from typing import Any

from ocr_operator import spec as spec_mod
from ocr_operator import wiring
from ocr_operator.labels import IDENTITY
from ocr_operator.ocrservice.reconcile import reconcile as reconcile_with
from ocr_operator.runtime.cache import Store
from ocr_operator.runtime.controller import Context, Result, Runtime
from ocr_operator.runtime.jobs import Jobs
from ocr_operator.runtime.kube import ApiError


def owner(spec: dict[str, Any] | None = None, *, name: str = "ocr", namespace: str = "team-a",
          uid: str = "11111111-2222-3333-4444-555555555555", generation: int = 1,
          status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "ocr.causalflow.dev/v1alpha1",
        "kind": "OcrService",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": {"image": "registry.example/ocr-server:1.0", **(spec or {})},
    }
    if status is not None:
        body["status"] = status
    return body


def parsed(body: dict[str, Any]) -> spec_mod.OcrServiceSpec:
    return spec_mod.parse(copy.deepcopy(body["spec"]))


_RV = itertools.count(500)


def reconcile(kube: Any, owner: dict[str, Any], *, now: dt.datetime, store: Store | None = None,
              status_hold: float = 0.0, jobs: Jobs | None = None,
              available: frozenset[str] = frozenset()) -> Result:
    """One OcrService reconcile on a runtime of `kube` and `store` (default: a cache that has
    listed nothing, so every child is read once)."""
    runtime = Runtime(kube, store if store is not None else wiring.store())
    return reconcile_with(runtime, owner, Context(now=now, available=available, status_hold=status_hold, jobs=jobs))


class ClusterKube:
    """An API server holding objects by (kind, name); lists filter on labels, GETs do not; a
    create refuses a taken name, as the API server does."""

    identity = IDENTITY

    def __init__(self, objects: dict[tuple[str, str], dict] | None = None):
        self.objects = {k: copy.deepcopy(v) for k, v in (objects or {}).items()}
        self.calls: list[tuple[str, str, str]] = []
        self.status: dict | None = None

    async def create(self, kind, namespace, body):
        key = (kind, body["metadata"]["name"])
        self.calls.append(("create", *key))
        if key in self.objects:
            raise ApiError(409, "AlreadyExists", f"{kind} {key[1]} already exists")
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = f"rv-{next(_RV)}"
        self.objects[key] = out
        return copy.deepcopy(out)

    async def delete(self, kind, namespace, name, *, uid=None):
        self.calls.append(("delete", kind, name))
        self.objects.pop((kind, name), None)

    async def apply(self, body, *, manager="x", force=True, subresource=None):
        key = (body["kind"], body["metadata"]["name"])
        self.calls.append(("apply", *key))
        out = copy.deepcopy(body)
        out["metadata"]["resourceVersion"] = f"rv-{next(_RV)}"
        self.objects[key] = out
        return copy.deepcopy(out)

    async def merge_patch(self, kind, namespace, name, patch, *, subresource=None):
        self.calls.append(("patch", kind, name))
        if "status" not in patch:  # a change of the object itself (a Job's spec.suspend), not a status write
            obj = self.objects[(kind, name)]
            if (patch.get("metadata") or {}).get("uid") not in (None, obj["metadata"].get("uid")):
                raise ApiError(409, "Conflict", f"{kind} {name}: the patch's uid precondition failed")
            obj = self.objects[(kind, name)] = copy.deepcopy(merge_patch(obj, patch))
            obj["metadata"]["resourceVersion"] = f"rv-{next(_RV)}"
            obj["metadata"]["generation"] = int(obj["metadata"].get("generation") or 1) + 1
            return copy.deepcopy(obj)
        self.status = patch["status"]
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": f"rv-{next(_RV)}"},
                "status": patch["status"]}

    async def get(self, kind, namespace, name):
        self.calls.append(("get", kind, name))
        return copy.deepcopy(self.objects.get((kind, name)))

    async def list(self, kind, namespace, label_selector=None, *, field_selector=None):
        self.calls.append(("list", kind, label_selector or field_selector or ""))
        want = dict(part.split("=", 1) for part in (label_selector or "").split(",") if part)
        fields = dict(part.split("=", 1) for part in (field_selector or "").split(",") if part)
        return [copy.deepcopy(o) for (k, _), o in self.objects.items()
                if k == kind and want.items() <= ((o["metadata"].get("labels") or {}).items())
                and all(_field(o, path) == value for path, value in fields.items())]


def _field(obj: dict, path: str) -> Any:
    """A field selector's dotted path in an object (`involvedObject.uid`)."""
    for part in path.split("."):
        obj = (obj or {}).get(part) if isinstance(obj, dict) else None
    return obj


class GateKube(ClusterKube):
    """ClusterKube that also takes the quality gate's pod status patches (kept in `pod_patches`)."""

    def __init__(self, objects: dict[tuple[str, str], dict] | None = None):
        super().__init__(objects)
        self.pod_patches: list[tuple[str, dict]] = []

    async def strategic_patch(self, kind, namespace, name, patch, *, subresource=None):
        self.calls.append(("strategic_patch", kind, name))
        self.pod_patches.append((name, patch))
        return {}


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, what the API server and `kubectl patch --type=merge` apply: null
    deletes, a mapping merges, anything else replaces. `target` is left as it was."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
