"""The one table of what the operator reads, watches and writes.

Watches (settings.py, handlers.py), the REST paths (kube.py), the snapshot (snapshot.py), the
cache (cache.py) and the chart's RBAC rules (checked by tests/unit/chart/test_rbac_rules.py)
all follow from it; garbage collection follows from the ownerReference every child in
``CHILDREN`` carries (naming.metadata), so removing an OcrService removes exactly these.
Add a kind here and every one of those places picks it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import naming

READ = ("get", "list", "watch")
WRITE = ("create", "patch", "delete")


@dataclass(frozen=True)
class ApiKind:
    kind: str
    group: str
    version: str
    plural: str
    verbs: tuple[str, ...]
    watched: bool = True     # a label-filtered watch wakes the owner and feeds the cache
    optional: bool = False   # served only where a CRD provides it (prometheus-operator)
    # The reconcile reads this kind's status (the rollout, the Ready condition, the HPA's view);
    # a status-only change of any other kind (a PDB's pod counts) updates the cache, wakes nothing.
    status_read: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS: dict[str, ApiKind] = {k.kind: k for k in (
    ApiKind("ConfigMap", "", "v1", "configmaps", READ + WRITE),
    ApiKind("HorizontalPodAutoscaler", "autoscaling", "v2", "horizontalpodautoscalers", READ + WRITE,
            status_read=True),
    ApiKind("Deployment", "apps", "v1", "deployments", READ + WRITE, status_read=True),
    ApiKind("Service", "", "v1", "services", READ + WRITE),
    ApiKind("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", READ + WRITE),
    ApiKind("NetworkPolicy", "networking.k8s.io", "v1", "networkpolicies", READ + WRITE),
    ApiKind("ServiceMonitor", "monitoring.coreos.com", "v1", "servicemonitors", READ + WRITE, optional=True),
    ApiKind("PrometheusRule", "monitoring.coreos.com", "v1", "prometheusrules", READ + WRITE, optional=True),
    # Pods are only read: the rollout judges the new revision's pods from what Kubernetes reports.
    ApiKind("Pod", "", "v1", "pods", ("list", "watch"), status_read=True),
)}


@dataclass(frozen=True)
class Child:
    """One object an OcrService owns: its plan key, its kind and its name."""

    key: str
    kind: str
    name: Callable[[str], str]


# Apply order: the HPA before the Deployment (a Deployment applied without replicas is never
# left without an owner of its size), the ConfigMap before the pods that mount it.
CHILDREN: tuple[Child, ...] = (
    Child("ConfigMap", "ConfigMap", naming.configmap_name),
    Child("HorizontalPodAutoscaler", "HorizontalPodAutoscaler", naming.hpa_name),
    Child("Deployment", "Deployment", naming.deployment_name),
    Child("Service", "Service", naming.service_name),
    Child("PodDisruptionBudget", "PodDisruptionBudget", naming.pdb_name),
    Child("NetworkPolicy", "NetworkPolicy", naming.networkpolicy_name),
    Child("ServiceMonitor", "ServiceMonitor", naming.servicemonitor_name),
    Child("PrometheusRule", "PrometheusRule", naming.prometheusrule_name),
    # The pod templates of past revisions (revisions.py), a second ConfigMap.
    Child("RevisionHistory", "ConfigMap", naming.revisions_name),
    # The quality gate's recorded outputs (quality.py), a third ConfigMap; only with a gate.
    Child("QualityRecords", "ConfigMap", naming.quality_name),
)
BY_KEY: dict[str, Child] = {c.key: c for c in CHILDREN}

# The leader-election Lease (leader.py, election.py): one object in the operator's own namespace,
# never in a watched one, so the chart grants it by a Role there (causalflow-ocr.leaderElectionRules),
# not with the children's rules. Read and replaced with its resourceVersion; never watched.
LEASE = ApiKind("Lease", "coordination.k8s.io", "v1", "leases", ("get", "create", "update"), watched=False)


def child_names(name: str) -> dict[str, str]:
    """Plan key -> name of that child of the OcrService `name`."""
    return {c.key: c.name(name) for c in CHILDREN}


def optional_kinds() -> tuple[str, ...]:
    """Kinds served only where a CRD provides them: rendered and read only while served."""
    return tuple(k.kind for k in KINDS.values() if k.optional)


def watched() -> tuple[ApiKind, ...]:
    """Kinds whose label-filtered watch streams feed the cache and wake the owner."""
    return tuple(k for k in KINDS.values() if k.watched)


# The quality gate (quality.py) sets its readiness condition on pods: their status subresource only.
POD_STATUS_RULE = (("", "pods/status"), frozenset({"patch"}))


def rbac_rules() -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs the operator needs on the children and pods."""
    return {**{(k.group, k.plural): frozenset(k.verbs) for k in KINDS.values()}, POD_STATUS_RULE[0]: POD_STATUS_RULE[1]}


def leader_election_rules() -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs leader election needs, in the operator's own namespace."""
    return {(LEASE.group, LEASE.plural): frozenset(LEASE.verbs)}
