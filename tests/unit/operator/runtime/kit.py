"""What the runtime's tests hand it instead of the operator's names and tables: the runtime knows
no domain, so its tests use none."""

from __future__ import annotations

from ocr_operator.runtime.identity import Identity
from ocr_operator.runtime.kinds import READ, WRITE, ApiKind

IDENTITY = Identity(field_manager="test-manager", version="0.0", managed_label="example.com/managed-by",
                    applied_hash_key="example.com/applied-hash")
MANAGED = {IDENTITY.managed_label: IDENTITY.field_manager}
OWNER_LABEL = "example.com/owner"  # the label that names a child's owner in these tests

CONFIGMAP = ApiKind("ConfigMap", "", "v1", "configmaps", READ + WRITE, owned=True)
SERVICE = ApiKind("Service", "", "v1", "services", READ + WRITE, owned=True)
DEPLOYMENT = ApiKind("Deployment", "apps", "v1", "deployments", READ + WRITE, owned=True, status_read=True)
BUDGET = ApiKind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", READ + WRITE, owned=True)
JOB = ApiKind("Job", "batch", "v1", "jobs", READ + ("create", "delete"))
POD = ApiKind("Pod", "", "v1", "pods", ("list", "watch"), status_read=True)
WIDGET = ApiKind("Widget", "example.com", "v1", "widgets", READ)  # an owner kind
KINDS = (CONFIGMAP, SERVICE, DEPLOYMENT, BUDGET, JOB, POD)


class FakeApi:
    """An API server in memory: objects by (kind, name); a create refuses a taken name (409), an
    apply creates or merges; every call is recorded."""

    def __init__(self, objects: dict[tuple[str, str], dict] | None = None) -> None:
        import copy

        self._copy = copy.deepcopy
        self.objects = {k: copy.deepcopy(v) for k, v in (objects or {}).items()}
        self.calls: list[tuple[str, str, str]] = []
        self.identity = IDENTITY
        self.rv = 100

    def _stored(self, body: dict) -> dict:
        self.rv += 1
        out = self._copy(body)
        out["metadata"]["resourceVersion"] = str(self.rv)
        out["metadata"].setdefault("uid", f"uid-{self.rv}")
        self.objects[(body["kind"], body["metadata"]["name"])] = out
        return self._copy(out)

    async def apply(self, body, *, manager=None, force=True, subresource=None):
        self.calls.append(("apply", body["kind"], body["metadata"]["name"]))
        return self._stored(body)

    async def create(self, kind, namespace, body):
        from ocr_operator.runtime.kube import ApiError

        self.calls.append(("create", kind, body["metadata"]["name"]))
        if (kind, body["metadata"]["name"]) in self.objects:
            raise ApiError(409, "AlreadyExists", f'{kind} "{body["metadata"]["name"]}" already exists')
        return self._stored(body)

    async def get(self, kind, namespace, name):
        self.calls.append(("get", kind, name))
        found = self.objects.get((kind, name))
        return self._copy(found) if found is not None else None

    async def delete(self, kind, namespace, name, *, uid=None):
        self.calls.append(("delete", kind, name))
        self.objects.pop((kind, name), None)

    async def merge_patch(self, kind, namespace, name, patch, *, subresource=None):
        self.calls.append(("patch", kind, name))
        return {"metadata": {"name": name, "namespace": namespace}, **patch}
