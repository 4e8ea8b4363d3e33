"""The one table of what the OcrBatch controller reads, watches and writes (the OcrService's
children.py, for batches).

The REST paths (the runtime's client), the watches (handlers.py) and the chart's RBAC rules
(checked by tests/unit/chart/test_rbac_rules.py) follow from it.

- OcrBatches: watched; an ended one is deleted once its spec.ttlSecondsAfterFinished has passed.
- Jobs: created once per batch (a create, which fails on a taken name), deleted on cancel, patched
  for spec.suspend (their own spec.suspend follows the batch's), watched (label-filtered) to follow
  their end.
- Pods: the workers, watched (the same label-filtered pod watch as the OcrService's); a running
  worker's last progress line is read from its log (pods/log), a finished one's from its status.
  A stalled worker's pod is deleted (spec.stallSeconds, stall.py), and one whose node never
  confirms the deletion is marked Failed through pods/status.
- ConfigMaps: the workers' configuration (already granted by the OcrService's table).
- PersistentVolumeClaims: only looked up, so a batch naming a missing claim does not start.
- Secrets: only `get`, by name, for the S3 credentials' presence and the callback's HMAC key;
  never listed or watched.
- Events: the Job's, listed (by the Job's uid) while it has fewer pods than it should: the Job
  controller's refusals to create them are only Events (waiting.py). The runtime posts its own.
"""

from __future__ import annotations

from ocr_operator.runtime.kinds import READ, ApiKind
from ocr_operator.spec import GROUP, VERSION

OCRBATCH = ApiKind("OcrBatch", GROUP, VERSION, "ocrbatches", READ + ("delete",))  # spec.ttlSecondsAfterFinished
JOB = ApiKind("Job", "batch", "v1", "jobs", READ + ("create", "patch", "delete"))
CLAIM = ApiKind("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", ("get",), watched=False)
SECRET = ApiKind("Secret", "", "v1", "secrets", ("get",), watched=False)
KINDS: dict[str, ApiKind] = {k.kind: k for k in (OCRBATCH, JOB, CLAIM, SECRET)}
# What the cache holds of the batches beside the OcrService's kinds (its ConfigMaps and pods).
CHILD_KINDS: tuple[ApiKind, ...] = (JOB,)

# Beyond the kinds' own verbs: the status (one merge patch when it changed), the workers' logs, and the
# finalizers right that blockOwnerDeletion on the Job and ConfigMap needs where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
SUBRESOURCE_RULES: dict[tuple[str, str], frozenset[str]] = {
    (GROUP, "ocrbatches/status"): frozenset({"patch"}),
    (GROUP, "ocrbatches/finalizers"): frozenset({"update"}),
    ("", "pods/log"): frozenset({"get"}),
    ("", "pods"): frozenset({"delete"}),  # a stalled worker's
    ("", "pods/status"): frozenset({"patch"}),  # a stalled worker's on a lost node: phase Failed
    ("", "events"): frozenset({"list"}),  # the Job's FailedCreate (waiting.py)
}


def rbac_rules() -> dict[tuple[str, str], frozenset[str]]:
    """(apiGroup, resource) -> verbs the batch controller needs beyond the OcrService's table."""
    return {**{(k.group, k.plural): frozenset(k.verbs) for k in KINDS.values()}, **SUBRESOURCE_RULES}
