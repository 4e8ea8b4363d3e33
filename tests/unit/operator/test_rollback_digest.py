"""A rollback re-applies a stored pod template only when its full sha256 is the digest the operator
recorded in the OcrService's status (status.rollout.lastGoodDigest), not merely when it hashes to
the 10-hex-digit revision it is stored under: 40 bits are few enough to forge, and the revision
history's ConfigMap is anyone's to edit who may write ConfigMaps in the namespace.

A forged template is simulated by making the short revision hash (naming.template_hash) collide
for the attacker's template, as a forger would by searching 2**40 templates.
"""

from __future__ import annotations

import json

from ocr_operator.ocrservice import naming, revisions

from .helpers import ClusterKube, owner, reconcile
from .test_rollback_trust import ATTACKER, GOOD, NOW, failed, image, run, tamper, upgraded


def collide(monkeypatch, revision: str) -> None:
    """Every template with the attacker's image now hashes to `revision` (a 40-bit collision)."""
    real = naming.template_hash
    monkeypatch.setattr(naming, "template_hash",
                        lambda tpl: revision if ATTACKER in json.dumps(tpl) else real(tpl))


def stored_images(kube: ClusterKube) -> list[str]:
    history = json.loads(kube.objects[("ConfigMap", "ocr-revisions")]["data"][revisions.DATA_KEY])
    return [e["template"]["spec"]["containers"][0]["image"] for e in history]


def test_a_forged_template_matching_the_good_revisions_short_hash_is_not_rolled_back_to(monkeypatch):
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    tamper(kube, good)
    collide(monkeypatch, good)
    forged = next(e["template"] for e in json.loads(kube.objects[("ConfigMap", "ocr-revisions")]["data"][
        revisions.DATA_KEY]) if e["revision"] == good)
    assert ATTACKER in json.dumps(forged) and revisions.verified(good, forged)  # the short revision is fooled
    result = run(reconcile(kube, failed(body, good, bad), now=NOW))
    assert image(kube) != ATTACKER and ATTACKER not in stored_images(kube)
    assert kube.status["rollout"]["phase"] == "NoGoodRevision"
    degraded = {c["type"]: c for c in kube.status["conditions"]}["Degraded"]
    assert f"rollback to revision {good} refused" in degraded["message"]
    assert "sha256 is not the digest the status records" in degraded["message"]
    assert ("Warning", "RollbackRefused") in [(t, r) for t, r, _ in result.events]


def test_a_genuine_stored_template_is_rolled_back_to_and_its_full_digest_stays_recorded():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    digest = body["status"]["rollout"]["lastGoodDigest"]
    run(reconcile(kube, failed(body, good, bad), now=NOW))
    assert image(kube) == GOOD and kube.status["rollout"]["phase"] == "RolledBack"
    live = kube.objects[("Deployment", "ocr")]["spec"]["template"]
    assert naming.template_digest(live) == digest and len(digest) == 64 and digest.startswith(good)
    assert kube.status["rollout"]["lastGoodDigest"] == kube.status["rollout"]["currentDigest"] == digest


def test_a_revision_rolled_out_records_its_full_digest_and_the_last_goods_is_carried():
    kube = ClusterKube()
    run(reconcile(kube, owner({"replicas": 1, "image": GOOD}), now=NOW))
    first = kube.status["rollout"]
    assert first["currentDigest"] == naming.template_digest(kube.objects[("Deployment", "ocr")]["spec"]["template"])
    kube = ClusterKube()
    _, good, bad = upgraded(kube)  # GOOD again, marked good, then BAD rolled out
    record = kube.status["rollout"]
    assert record["currentRevision"] == bad and record["currentDigest"] == naming.template_digest(
        kube.objects[("Deployment", "ocr")]["spec"]["template"])
    assert record["lastGoodRevision"] == good and record["lastGoodDigest"] == first["currentDigest"]


def test_a_rollback_whose_status_records_no_digest_is_refused_and_says_so():
    kube = ClusterKube()
    body, good, bad = upgraded(kube)
    legacy = failed(body, good, bad)  # as an operator before the digests wrote it
    legacy["status"]["rollout"].pop("lastGoodDigest")
    result = run(reconcile(kube, legacy, now=NOW))
    assert image(kube) != GOOD and kube.status["rollout"]["phase"] == "NoGoodRevision"
    degraded = {c["type"]: c for c in kube.status["conditions"]}["Degraded"]
    assert "records no full digest" in degraded["message"]
    assert ("Warning", "RollbackRefused") in [(t, r) for t, r, _ in result.events]


def test_a_settled_status_without_digests_gets_them_at_the_next_reconcile():
    kube = ClusterKube()
    run(reconcile(kube, owner({"replicas": 1, "image": GOOD}), now=NOW))
    good = kube.status["currentRevision"]
    settled = owner({"replicas": 1, "image": GOOD},  # as an operator before the digests wrote it
                    status={"rollout": {"phase": "Healthy", "currentRevision": good, "lastGoodRevision": good}})
    run(reconcile(kube, settled, now=NOW))
    digest = naming.template_digest(kube.objects[("Deployment", "ocr")]["spec"]["template"])
    assert kube.status["rollout"]["currentDigest"] == kube.status["rollout"]["lastGoodDigest"] == digest
