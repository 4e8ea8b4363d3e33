"""API kinds: where each lives on the API server, and how a controller uses it.

A controller describes every kind it reads, watches or writes with one ApiKind; the REST paths
(kube.py), the watches and the cache's treatment (cache.py), and the chart's RBAC rules (checked
by tests/unit/chart/test_rbac_rules.py) follow from those tables. The runtime's own kinds are here:
the Events it posts and the Lease of leader election.
"""

from __future__ import annotations

from dataclasses import dataclass

READ = ("get", "list", "watch")
WRITE = ("create", "patch", "delete")


@dataclass(frozen=True)
class ApiKind:
    kind: str
    group: str
    version: str
    plural: str
    verbs: tuple[str, ...] = ()  # what the operator needs on it (RBAC)
    watched: bool = True  # a watch feeds the cache (and wakes the owner)
    optional: bool = False  # served only where a CRD provides it: rendered and read only while served
    # The reconcile reads this kind's status; a status-only change of any other kind (a PDB's pod
    # counts move with every pod) updates the cache and wakes nothing.
    status_read: bool = False
    # Watched unfiltered: the cache holds every object of the kind, the operator's in full and the
    # others' metadata, so an apply knows whether a name is taken by someone else's object without
    # asking. False: watched by the managed-by label only (pods, Jobs: the operator creates no pod,
    # and creates Jobs with a create that fails on a taken name).
    owned: bool = False
    namespaced: bool = True
    # The reconcile reads only who controls an object of this kind (ReplicaSets: the owner chain
    # from a pod to its Deployment): the cache keeps its stub (cache.stub), whoever's it is, and a
    # change of anything else wakes nothing.
    metadata_only: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """`<plural>.<group>`: a custom kind's CRD name, and how RBAC refusals and logs name it."""
        return f"{self.plural}.{self.group}"

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.api_version}" if self.group else f"/api/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


EVENT = ApiKind("Event", "", "v1", "events", ("create", "patch"), watched=False)
# Leader election's Lease: one object in the operator's own namespace, never a watched one, so the
# chart grants it by a Role there; read and replaced with its resourceVersion, never watched.
LEASE = ApiKind("Lease", "coordination.k8s.io", "v1", "leases", ("get", "create", "update"), watched=False)
RUNTIME_KINDS: tuple[ApiKind, ...] = (EVENT, LEASE)


def rbac_rules(kinds: tuple[ApiKind, ...] | list[ApiKind]) -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs the operator needs on `kinds`."""
    return {(k.group, k.plural): frozenset(k.verbs) for k in kinds}
