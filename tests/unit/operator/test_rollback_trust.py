"""A rollback re-applies only a stored pod template that hashes to its revision.

The revision history lives in a ConfigMap anyone with ConfigMap rights in the namespace can
edit; these tests edit it between reconciles, as such a user would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json

from ocr_operator.ocrservice import revisions
from .helpers import reconcile

from .helpers import ClusterKube, owner

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
GOOD, BAD = "registry.example/ocr-server:1.0", "registry.example/ocr-server:2.0"
ATTACKER = "attacker.example/miner:latest"


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def image(kube: ClusterKube) -> str:
    return kube.objects[("Deployment", "ocr")]["spec"]["template"]["spec"]["containers"][0]["image"]


def upgraded(kube: ClusterKube) -> tuple[dict, str, str]:
    """Revision GOOD deployed and settled, then BAD rolled out: (the OcrService, good, bad). The
    settled status carries the full digest the operator recorded for GOOD when it rolled it out,
    as the operator's own status does once GOOD is marked good."""
    run(reconcile(kube, owner({"replicas": 1, "image": GOOD}), now=NOW))
    good, digest = kube.status["currentRevision"], kube.status["rollout"].get("currentDigest")
    body = owner({"replicas": 1, "image": BAD}, generation=2,
                 status={"rollout": {"phase": "Healthy", "currentRevision": good, "lastGoodRevision": good,
                                     "currentDigest": digest, "lastGoodDigest": digest}})
    run(reconcile(kube, body, now=NOW))
    return body, good, kube.status["currentRevision"]


def failed(body: dict, good: str, bad: str, phase: str = "Failed") -> dict:
    """`bad` failed (OOMKilled) with `good` to roll back to: autoRollback rolls back now. The
    operator's record keeps `good`'s full digest (and it is the current one once rolled back)."""
    digest = body["status"]["rollout"].get("lastGoodDigest")
    return {**body, "status": {"rollout": {"phase": phase, "currentRevision": good if phase == "RolledBack" else bad,
                                           "lastGoodRevision": good, "failedRevision": bad,
                                           "failedReason": "OOMKilled", "failedMessage": "pod ocr-1 was OOMKilled",
                                           "lastGoodDigest": digest,
                                           **({"currentDigest": digest} if phase == "RolledBack" else {})}}}


def tamper(kube: ClusterKube, revision: str) -> None:
    """Swap the image of `revision`'s stored template, keeping its revision id and label."""
    cm = kube.objects[("ConfigMap", "ocr-revisions")]
    entries = json.loads(cm["data"][revisions.DATA_KEY])
    for entry in entries:
        if entry["revision"] == revision:
            entry["template"]["spec"]["containers"][0]["image"] = ATTACKER
    cm["data"][revisions.DATA_KEY] = json.dumps(entries)


def test_a_rollback_to_an_intact_stored_template_applies_it():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    result = run(reconcile(kube, failed(body, good, bad), now=NOW))
    assert image(kube) == GOOD and kube.status["rollout"]["phase"] == "RolledBack"
    assert "RolledBack" in [reason for _, reason, _ in result.events]


def test_a_rollback_to_a_tampered_template_applies_nothing_tampered_and_the_failed_revision_stays():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    tamper(kube, good)
    run(reconcile(kube, failed(body, good, bad), now=NOW))
    assert image(kube) == BAD
    assert kube.status["currentRevision"] == bad and kube.status["failedRevision"] == bad
    history = json.loads(kube.objects[("ConfigMap", "ocr-revisions")]["data"][revisions.DATA_KEY])
    assert ATTACKER not in json.dumps(history)  # the tampered entry is dropped, not written back


def test_a_refused_rollback_is_reported_in_the_status_and_by_a_warning_event():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    tamper(kube, good)
    result = run(reconcile(kube, failed(body, good, bad), now=NOW))
    degraded = {c["type"]: c for c in kube.status["conditions"]}["Degraded"]
    assert degraded["status"] == "True"
    assert f"rollback to revision {good} refused" in degraded["message"]
    assert "does not match its revision hash" in degraded["message"]
    assert kube.status["rollout"]["phase"] == "NoGoodRevision"
    reasons = [(type_, reason) for type_, reason, _ in result.events]
    assert ("Warning", "RollbackRefused") in reasons and ("Warning", "RolledBack") not in reasons


def test_a_refused_rollback_is_not_tried_again_by_the_next_reconcile():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    tamper(kube, good)
    run(reconcile(kube, failed(body, good, bad), now=NOW))
    again = run(reconcile(kube, {**body, "status": kube.status}, now=NOW))
    assert again.events == [] and image(kube) == BAD


def test_a_deployment_already_rolled_back_keeps_running_when_its_stored_template_is_tampered_with():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    run(reconcile(kube, failed(body, good, bad), now=NOW))  # rolled back: the Deployment runs `good`
    tamper(kube, good)
    run(reconcile(kube, failed(body, good, bad, phase="RolledBack"), now=NOW))
    assert image(kube) == GOOD
    dep = kube.objects[("Deployment", "ocr")]
    assert dep["metadata"]["annotations"]["ocr.causalflow.dev/revision"] == good
