"""The pod template history kept in the owned ConfigMap <name>-revisions (pure, no cluster)."""

from __future__ import annotations

import json

import pytest

from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.revisions import History, parse_history, render_history, target_template

OWNER = {
    "apiVersion": "ocr.causalflow.dev/v1alpha1",
    "kind": "OcrService",
    "metadata": {"name": "invoices", "namespace": "ocr", "uid": "0b6f4d8e-1111-2222-3333-444455556666"},
}


def template(image: str) -> dict:
    return {
        "metadata": {"labels": {"app.kubernetes.io/instance": "invoices"}},
        "spec": {"containers": [{"name": "server", "image": image}]},
    }


def test_a_recorded_template_is_returned_as_an_equal_independent_copy():
    history = History().record("r1", template("ocr:1"))
    got = history.template("r1")
    assert got == template("ocr:1")
    got["spec"]["containers"][0]["image"] = "changed"
    assert history.template("r1") == template("ocr:1")


def test_an_unknown_revision_has_no_template():
    assert History().record("r1", template("ocr:1")).template("zz") is None
    assert History().template(None) is None


def test_recording_the_same_template_again_returns_the_same_history():
    history = History().record("r1", template("ocr:1"))
    assert history.record("r1", template("ocr:1")) is history


def test_recording_an_old_revision_again_moves_it_to_the_newest_place():
    history = History().record("r1", template("ocr:1")).record("r2", template("ocr:2")).record("r1", template("ocr:1"))
    assert history.revisions() == ("r2", "r1")


def test_the_history_keeps_only_the_newest_revisions_up_to_its_limit():
    history = History(limit=3)
    for i in range(6):
        history = history.record(f"r{i}", template(f"ocr:{i}"))
    assert history.revisions() == ("r3", "r4", "r5")


def test_the_last_good_revision_is_never_dropped_from_the_history():
    history = History(limit=2).record("good", template("ocr:good")).mark_good("good")
    for i in range(5):
        history = history.record(f"bad{i}", template(f"ocr:bad{i}"))
    assert history.revisions() == ("good", "bad4")
    assert history.template("good") == template("ocr:good")


def test_marking_a_revision_without_a_stored_template_as_good_is_refused():
    with pytest.raises(KeyError):
        History().mark_good("r9")


def test_the_configmap_is_named_labelled_and_owned_by_the_ocrservice():
    cm = render_history(OWNER, History().record("r1", template("ocr:1")).mark_good("r1"))
    assert cm["apiVersion"] == "v1" and cm["kind"] == "ConfigMap"
    assert cm["metadata"]["name"] == "invoices-revisions"
    assert cm["metadata"]["namespace"] == "ocr"
    assert cm["metadata"]["labels"]["app.kubernetes.io/instance"] == "invoices"
    assert cm["metadata"]["labels"] == naming.labels("invoices")
    (ref,) = cm["metadata"]["ownerReferences"]
    assert ref["kind"] == "OcrService" and ref["uid"] == OWNER["metadata"]["uid"] and ref["controller"] is True
    assert all(isinstance(v, str) for v in cm["data"].values())


def test_marking_a_revision_good_leaves_the_configmap_unchanged():
    # The last good revision is rollout state (status.lastGoodRevision): no ConfigMap write for it.
    history = History().record("r1", template("ocr:1"))
    assert render_history(OWNER, history.mark_good("r1")) == render_history(OWNER, history)


def rev(image: str) -> str:
    """The real revision of template(image): parse_history keeps only templates that hash to theirs."""
    return naming.template_hash(template(image))


def test_a_rendered_history_parses_back_to_the_same_history():
    r1, r2 = rev("ocr:1"), rev("ocr:2")
    history = History().record(r1, template("ocr:1")).record(r2, template("ocr:2")).mark_good(r1)
    assert parse_history(render_history(OWNER, history), last_good=r1) == history


def test_the_last_good_revision_from_the_status_is_never_trimmed():
    good = rev("ocr:good")
    cm = render_history(OWNER, History(limit=2).record(good, template("ocr:good")))
    history = parse_history(cm, limit=2, last_good=good)
    for i in range(4):
        history = history.record(f"bad{i}", template(f"ocr:bad{i}"))
    assert history.revisions() == (good, "bad3")


def test_rendering_the_same_history_twice_gives_identical_manifests():
    history = History().record("r1", {"spec": {"b": 1, "a": [2, 1]}})
    assert json.dumps(render_history(OWNER, history)) == json.dumps(render_history(OWNER, history))


def test_a_missing_configmap_is_an_empty_history():
    assert parse_history(None) == History()
    assert parse_history({"data": {}}).revisions() == ()


def test_corrupt_configmap_data_is_read_as_an_empty_history_instead_of_failing():
    assert parse_history({"data": {"history.json": "{not json"}}, last_good="r1") == History()
    assert parse_history({"data": {"history.json": '[{"revision": 1}]'}}).revisions() == ()


def test_a_last_good_revision_without_its_template_is_not_trusted():
    r1 = rev("ocr:1")
    cm = {"data": {"history.json": json.dumps([{"revision": r1, "template": template("ocr:1")}])}}
    assert parse_history(cm, last_good="r7").last_good is None
    assert parse_history(cm, last_good=r1).last_good == r1


def stored(*entries: tuple[str, dict]) -> dict:
    return {"data": {"history.json": json.dumps([{"revision": r, "template": t} for r, t in entries])}}


def test_a_stored_template_that_does_not_hash_to_its_revision_is_rejected():
    good = rev("ocr:1")
    tampered = template("attacker/image:1")  # stored under the revision of ocr:1
    history = parse_history(stored((good, tampered)), last_good=good)
    assert history.template(good) is None and history.revisions() == ()
    assert history.rejected == (good,) and history.last_good is None


def test_a_stored_template_whose_revision_label_names_another_revision_is_rejected():
    other = template("ocr:1")
    other["metadata"]["labels"][naming.REVISION_KEY] = "someother"
    history = parse_history(stored((rev("ocr:1"), other)))
    assert history.rejected == (rev("ocr:1"),)


def test_an_intact_stored_template_with_its_own_revision_label_is_kept():
    tpl = template("ocr:1")
    tpl["metadata"]["labels"][naming.REVISION_KEY] = rev("ocr:1")  # as the operator stores it
    history = parse_history(stored((rev("ocr:1"), tpl)))
    assert history.template(rev("ocr:1")) == tpl and history.rejected == ()


def test_a_rejected_revision_is_dropped_from_the_configmap_at_its_next_write():
    good, bad = rev("ocr:1"), rev("ocr:2")
    history = parse_history(stored((good, template("ocr:1")), (bad, template("attacker/image:1"))))
    written = json.loads(render_history(OWNER, history)["data"]["history.json"])
    assert [e["revision"] for e in written] == [good]


def test_the_target_template_is_the_rendered_one_for_the_desired_revision_and_the_stored_one_otherwise():
    history = History().record("old", template("ocr:old")).mark_good("old")
    assert target_template("new", "new", template("ocr:new"), history) == template("ocr:new")
    assert target_template("old", "new", template("ocr:new"), history) == template("ocr:old")
    assert target_template("gone", "new", template("ocr:new"), history) is None
