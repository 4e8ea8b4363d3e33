"""The full digests a rollback checks stored templates against (pure, no cluster): naming.
template_digest, the digests the status records (RolloutStatus.digests / with_digests) and the
history read with them (revisions.parse_history(digests=), target_template)."""

from __future__ import annotations

import json

from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.revisions import History, parse_history, render_history, target_template
from ocr_operator.ocrservice.rollout import RolloutStatus

from .test_revisions import OWNER, rev, stored, template


def test_the_full_digest_is_a_sha256_whose_first_ten_digits_are_the_revision():
    tpl = template("ocr:1")
    stamped = json.loads(json.dumps(tpl))
    stamped["metadata"]["labels"][naming.REVISION_KEY] = rev("ocr:1")
    digest = naming.template_digest(tpl)
    assert len(digest) == 64 and digest[:10] == rev("ocr:1") and naming.template_digest(stamped) == digest


def test_a_stored_template_whose_sha256_is_not_the_recorded_digest_is_dropped_and_never_a_target():
    r1 = rev("ocr:1")
    other = "0" * 54  # a digest of another template with the same 10-digit revision
    history = parse_history(stored((r1, template("ocr:1"))), last_good=r1, digests={r1: r1 + other})
    assert history.mismatched == (r1,) and history.revisions() == () and history.last_good is None
    assert target_template(r1, "new", template("ocr:new"), history) is None
    assert json.loads(render_history(OWNER, history)["data"]["history.json"]) == []


def test_a_stored_template_is_a_rollback_target_only_with_a_recorded_digest_it_matches():
    r1 = rev("ocr:1")
    cm = stored((r1, template("ocr:1")))
    assert target_template(r1, "new", template("ocr:new"), parse_history(cm)) is None  # nothing to check it by
    checked = parse_history(cm, digests={r1: naming.template_digest(template("ocr:1"))})
    assert target_template(r1, "new", template("ocr:new"), checked) == template("ocr:1")


def test_a_template_the_operator_records_itself_carries_its_own_digest():
    history = History().record("r1", template("ocr:1"))
    assert history.digests == {"r1": naming.template_digest(template("ocr:1"))}
    assert target_template("r1", "new", template("ocr:new"), history) == template("ocr:1")


def test_the_digests_follow_their_revisions_from_current_to_last_good():
    prior = RolloutStatus(current_revision="aaaaaaaaaa", current_digest="aaaaaaaaaa" + "1" * 54,
                          last_good_revision="bbbbbbbbbb", last_good_digest="bbbbbbbbbb" + "2" * 54)
    known = {**prior.digests(), "cccccccccc": "cccccccccc" + "3" * 54}
    moved = RolloutStatus(current_revision="cccccccccc", last_good_revision="aaaaaaaaaa").with_digests(known)
    assert moved.current_digest == "cccccccccc" + "3" * 54 and moved.last_good_digest == "aaaaaaaaaa" + "1" * 54
    assert RolloutStatus.from_status({"rollout": moved.to_status()}) == moved


def test_a_recorded_digest_that_does_not_begin_with_its_revision_is_no_digest_of_it():
    status = RolloutStatus(current_revision="aaaaaaaaaa", current_digest="f" * 64,
                           last_good_revision="bbbbbbbbbb", last_good_digest="bbbbbbbbbb" + "2" * 54)
    assert status.digests() == {"bbbbbbbbbb": "bbbbbbbbbb" + "2" * 54}
