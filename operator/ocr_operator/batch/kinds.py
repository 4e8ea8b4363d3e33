"""The one table of what the OcrBatch controller reads, watches and writes (children.py's for batches).

The REST paths (kube.TYPES), the watches (handlers.py) and the chart's RBAC rules (checked by
tests/unit/chart/test_rbac_rules.py) follow from it.

- Jobs: created once per batch, deleted on cancel, watched (label-filtered) to follow their end.
- Pods: the workers, watched (the same label-filtered pod watch as the OcrService's); a running
  worker's last progress line is read from its log (pods/log), a finished one's from its status.
- ConfigMaps: the workers' configuration (already granted by the OcrService's table).
- PersistentVolumeClaims: only looked up, so a batch naming a missing claim does not start.
- Secrets: only `get`, by name, for the S3 credentials' presence and the callback's HMAC key;
  never listed or watched.
"""

from __future__ import annotations

from ..children import READ, ApiKind

OCRBATCH = ApiKind("OcrBatch", "ocr.causalflow.dev", "v1alpha1", "ocrbatches", READ)
JOB = ApiKind("Job", "batch", "v1", "jobs", READ + ("create", "delete"))
CLAIM = ApiKind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", ("get",), watched=False)
SECRET = ApiKind("Secret", "", "v1", "secrets", ("get",), watched=False)
KINDS: dict[str, ApiKind] = {k.kind: k for k in (OCRBATCH, JOB, CLAIM, SECRET)}

# Subresources: the status (one merge patch when it changed), the workers' logs, and the
# finalizers right that blockOwnerDeletion on the Job and ConfigMap needs where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
SUBRESOURCE_RULES: dict[tuple[str, str], frozenset[str]] = {
    ("ocr.causalflow.dev", "ocrbatches/status"): frozenset({"patch"}),
    ("ocr.causalflow.dev", "ocrbatches/finalizers"): frozenset({"update"}),
    ("", "pods/log"): frozenset({"get"}),
}


def rbac_rules() -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs the batch controller needs beyond the OcrService's table."""
    return {**{(k.group, k.plural): frozenset(k.verbs) for k in KINDS.values()}, **SUBRESOURCE_RULES}
