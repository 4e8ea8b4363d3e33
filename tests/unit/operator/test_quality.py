"""The quality gate's pure half (ocrservice/rollout: pages.py, verdict.py, gate.py): golden pages,
distances, the verdict, and the gate's step after each reconcile's rollout decision."""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass

import pytest

from ocr_limits.quality import MAX_GOLDEN_BYTES, MAX_GOLDEN_PAGES, MAX_PAGE_TEXT_CHARS, page_distance
from ocr_operator import spec as S
from ocr_operator.ocrservice.rollout import RolloutStatus
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import pages as PG
from ocr_operator.ocrservice.rollout import verdict as V

GATE = S.QualityGate(config_map="golden", max_mean_distance=0.05, max_page_distance=0.2)
ATTEMPT = "2026-12-02T10:00:00.000000Z"


def golden(pages: dict[str, bytes], expected: dict[str, str] | None = None) -> dict:
    return {"binaryData": {k: base64.b64encode(v).decode() for k, v in pages.items()},
            "data": {f"{k}.txt": v for k, v in (expected or {}).items()}}


def pages(expected: dict[str, str] | None = None) -> PG.GoldenPages:
    read = PG.read_pages(golden({"a.png": b"AAAA", "b.png": b"BBBB"}, expected), "golden")
    assert isinstance(read, PG.GoldenPages)
    return read


golden_pages = pages


@dataclass(frozen=True)
class Pod:
    name: str
    revision: str | None
    ready: bool = False
    awaiting_gate: bool = False
    ip: str | None = "10.0.0.1"
    deleting: bool = False


def outputs(**texts: str) -> tuple[V.Output, ...]:
    return tuple(V.Output.of(page.replace("_", "."), text, 7) for page, text in texts.items())


# --------------------------------------------------------------------------- golden pages


def test_golden_pages_are_the_binary_keys_in_order_with_their_expected_texts():
    read = PG.read_pages(golden({"b.png": b"2", "a.png": b"1"}, {"b.png": "two"}), "golden")
    assert [(p.name, p.data, p.expected) for p in read.pages] == [("a.png", b"1", None), ("b.png", b"2", "two")]


def test_a_missing_configmap_names_the_field_and_the_configmap():
    problem = PG.read_pages(None, "golden")
    assert problem.reason == PG.PAGES_MISSING
    assert "spec.rollout.qualityGate.goldenPages.configMapName" in problem.message and "golden" in problem.message


@pytest.mark.parametrize("cm, reason", [
    (golden({f"p{i}.png": b"x" for i in range(MAX_GOLDEN_PAGES + 1)}), PG.PAGES_TOO_LARGE),
    (golden({"a.png": b"x" * (MAX_GOLDEN_BYTES // 2 + 1), "b.png": b"x" * (MAX_GOLDEN_BYTES // 2)}), PG.PAGES_TOO_LARGE),
    (golden({"a.png": b"x"}, {"a.png": "t" * (MAX_PAGE_TEXT_CHARS + 1)}), PG.PAGES_TOO_LARGE),
    ({"data": {"a.txt": "only text"}}, PG.PAGES_INVALID),
    ({"binaryData": {"a.png": "not base64!"}}, PG.PAGES_INVALID),
    ({"binaryData": {"a.png": base64.b64encode(b"x").decode()}, "data": {"c.png.txt": "stray"}}, PG.PAGES_INVALID),
], ids=["too-many-pages", "too-many-bytes", "too-long-text", "no-page", "not-base64", "stray-text"])
def test_unusable_golden_pages_are_refused_with_their_reason(cm, reason):
    assert PG.read_pages(cm, "golden").reason == reason


def test_the_digest_changes_with_a_page_or_an_expected_text_and_only_then():
    base = pages()
    assert pages().digest == base.digest
    assert pages({"a.png": "text"}).digest != base.digest
    other = PG.read_pages(golden({"a.png": b"AAAB", "b.png": b"BBBB"}), "golden")
    assert other.digest != base.digest


def test_outputs_recorded_with_other_gate_settings_are_no_baseline():
    cm = golden({"a.png": b"AAAA"})
    assert PG.read_pages(cm, "g", settings="maxNewTokens=32").digest != PG.read_pages(cm, "g", settings="maxNewTokens=64").digest


# --------------------------------------------------------------------------- distance and verdict


def test_distance_is_the_normalised_levenshtein_distance():
    assert V.distance("abcd", "abcd") == 0.0
    assert V.distance("abcd", "abcx") == 0.25
    assert V.distance("abcd", "") == 1.0
    assert V.distance("", "") == 0.0


def test_the_golden_pages_distance_is_the_shared_page_distance_the_shadow_pages_use():
    assert V.distance("abc", "abx") == page_distance("abc", "abx") == 0.3333  # rounded to 4 places, as the server's


def test_the_same_outputs_as_the_baseline_pass_with_distance_zero():
    baseline = V.Recording("old", pages().digest, outputs(a_png="hello", b_png="world"))
    verdict = V.judge(outputs(a_png="hello", b_png="world"), pages(), baseline, GATE)
    assert verdict.passed and verdict.mean == 0.0 and verdict.against == "revision old"


def test_one_page_over_the_page_threshold_fails_naming_the_page_its_distance_and_the_threshold():
    baseline = V.Recording("old", pages().digest, outputs(a_png="hello", b_png="world"))
    verdict = V.judge(outputs(a_png="hello", b_png="xxxxx"), pages(), baseline, GATE)
    assert not verdict.passed
    assert verdict.worst_page == "b.png" and verdict.worst == 1.0
    assert verdict.message.startswith("page b.png: distance 1.0000 > maxPageDistance 0.2")


def test_a_mean_over_its_threshold_fails_even_when_every_page_is_within_its_own():
    baseline = V.Recording("old", pages().digest, outputs(a_png="0123456789", b_png="0123456789"))
    verdict = V.judge(outputs(a_png="0123456x89", b_png="0123456789"), pages(), baseline, GATE)
    assert verdict.passed and verdict.worst == 0.1 and verdict.mean == 0.05  # the thresholds are inclusive
    gate = S.QualityGate(config_map="g", max_mean_distance=0.04, max_page_distance=0.2)
    verdict = V.judge(outputs(a_png="0123456x89", b_png="0123456789"), pages(), baseline, gate)
    assert not verdict.passed and verdict.message.startswith("mean distance 0.0500 over 2 pages > maxMeanDistance 0.04")
    assert "worst page a.png: distance 0.1000" in verdict.message


def test_expected_texts_are_compared_instead_of_the_baseline():
    truth = pages({"a.png": "hello", "b.png": "world"})
    baseline = V.Recording("old", truth.digest, outputs(a_png="zzzzz", b_png="zzzzz"))
    verdict = V.judge(outputs(a_png="hello", b_png="world"), truth, baseline, GATE)
    assert verdict.passed and verdict.against == "expected texts"


def test_without_a_baseline_or_expected_texts_the_outputs_are_recorded_not_judged():
    verdict = V.judge(outputs(a_png="x", b_png="y"), pages(), None, GATE)
    assert verdict.passed and verdict.distances == () and "recorded" in verdict.message


def test_recorded_outputs_are_bounded_and_hashed():
    out = V.Output.of("a.png", "t" * (MAX_PAGE_TEXT_CHARS + 10), 3)
    assert len(out.text) == MAX_PAGE_TEXT_CHARS and len(out.sha256) == 64
    rec = V.Recording("r", "d", (out,))
    assert V.parse_records({"data": V.records_data(V.Records(rec, None))}).baseline == rec


# --------------------------------------------------------------------------- conclude: a finished job


def rolling(current="new", last_good="old", attempt=ATTEMPT, progressing=True) -> RolloutStatus:
    """The rollout's state as the gate reads it."""
    return RolloutStatus(current_revision=current, last_good_revision=last_good, rollout_started=attempt,
                         phase="Progressing" if progressing else "Healthy")


def conclude(result, records=V.Records(), golden_pages=None, progressing=True):
    return G.conclude(G.GateInputs(GATE, golden_pages or pages(), records, None, result),
                      rolling(progressing=progressing))


def gate_job(digest=None, attempt=ATTEMPT, revision="new"):
    return G.Job(G.GATE, revision, "pod-new", "10.0.0.2", attempt, digest or pages().digest)


def test_a_gate_result_worse_than_the_baseline_fails_the_revision_with_quality_regression():
    baseline = V.Recording("old", pages().digest, outputs(a_png="hello", b_png="world"))
    out = conclude(G.Result(gate_job(), outputs(a_png="hello", b_png="w0r1d"), seconds=2.0), V.Records(baseline))
    assert out.failure.reason == G.REASON_QUALITY_REGRESSION and "page b.png: distance 0.4000" in out.failure.message
    assert out.failure.pod == "pod-new"
    assert out.record["phase"] == G.FAILED and out.record["worstPage"] == "b.png"


def test_a_passing_gate_result_records_the_distances_and_keeps_the_outputs_as_candidate():
    baseline = V.Recording("old", pages().digest, outputs(a_png="hello", b_png="world"))
    out = conclude(G.Result(gate_job(), outputs(a_png="hello", b_png="world")), V.Records(baseline))
    assert out.failure is None and out.record["phase"] == G.PASSED and out.record["meanDistance"] == 0.0
    assert out.record["pages"] == [{"name": "a.png", "distance": 0.0}, {"name": "b.png", "distance": 0.0}]
    assert out.records.candidate.revision == "new" and out.records.baseline == baseline


def test_a_page_the_pod_did_not_answer_fails_the_revision_with_quality_gate_error():
    out = conclude(G.Result(gate_job(), error="page a.png: HTTP 500"))
    assert (out.failure.reason, out.failure.message) == (
        G.REASON_GATE_ERROR, "pod pod-new did not answer the golden pages: page a.png: HTTP 500")


@pytest.mark.parametrize("job, kw", [
    (gate_job(attempt="2026-12-02T09:00:00.000000Z"), {}),
    (gate_job(revision="other"), {}),
    (gate_job(digest="stale"), {}),
    (gate_job(), {"progressing": False}),
], ids=["earlier-attempt", "other-revision", "other-pages", "not-rolling-out"])
def test_a_result_that_no_longer_belongs_to_the_rollout_is_dropped(job, kw):
    out = conclude(G.Result(job, outputs(a_png="zzz", b_png="zzz")), **kw)
    assert out.failure is None and out.record is None and out.records == V.Records()


def test_a_record_result_of_the_last_good_revision_becomes_the_baseline():
    job = G.Job(G.RECORD, "old", "pod-old", "10.0.0.1", ATTEMPT, pages().digest)
    out = conclude(G.Result(job, outputs(a_png="hello", b_png="world")))
    assert out.records.baseline.revision == "old" and out.records.baseline.text("b.png") == "world"


# --------------------------------------------------------------------------- next step


def step(pods, outcome=None, *, gate=GATE, pages=None, phase="Progressing", current_revision="new",
         last_good="old"):
    """The gate's step after a decision whose status is `phase`, `current_revision`, `last_good`."""
    decided = RolloutStatus(current_revision=current_revision, last_good_revision=last_good,
                            rollout_started=ATTEMPT, phase=phase)
    return G.next_step(G.GateInputs(gate, pages if pages is not None else golden_pages()),
                       outcome or G.Outcome(None, V.Records()), pods, decided)


def valid_baseline():
    return V.Records(V.Recording("old", pages().digest, outputs(a_png="a", b_png="b")))


def test_a_new_pod_awaiting_the_gate_gets_the_pages_once_the_baseline_is_recorded():
    s = step([Pod("old-1", "old", ready=True), Pod("new-1", "new", awaiting_gate=True, ip="10.0.0.9")],
             G.Outcome(None, valid_baseline()))
    assert s.job == G.Job(G.GATE, "new", "new-1", "10.0.0.9", ATTEMPT, pages().digest)
    assert s.admit == () and s.condition[:2] == ("Unknown", "GateRunning")


def test_changed_golden_pages_are_recorded_from_a_ready_last_good_pod_before_any_comparison():
    stale = V.Records(V.Recording("old", "an-older-digest", outputs(a_png="a")))
    s = step([Pod("old-1", "old", ready=True), Pod("new-1", "new", awaiting_gate=True)], G.Outcome(None, stale))
    assert s.job.kind == G.RECORD and s.job.pod == "old-1" and s.job.revision == "old"


def test_expected_texts_for_every_page_need_no_baseline():
    truth = pages({"a.png": "x", "b.png": "y"})
    s = step([Pod("new-1", "new", awaiting_gate=True)], pages=truth)
    assert s.job.kind == G.GATE


def test_a_passed_gate_admits_every_awaiting_pod_of_its_revision_and_of_the_last_good_one():
    record = {"revision": "new", "attempt": ATTEMPT, "phase": G.PASSED, "message": "ok"}
    s = step([Pod("new-1", "new", awaiting_gate=True), Pod("new-2", "new", awaiting_gate=True),
              Pod("old-2", "old", awaiting_gate=True), Pod("x-1", "x", awaiting_gate=True)],
             G.Outcome(record, valid_baseline()))
    assert s.admit == ("new-1", "new-2", "old-2") and s.job is None and s.condition[0] == "True"


def test_a_pass_of_an_earlier_attempt_admits_nothing():
    record = {"revision": "new", "attempt": "2026-12-01T00:00:00.000000Z", "phase": G.PASSED}
    s = step([Pod("new-1", "new", awaiting_gate=True)], G.Outcome(record, valid_baseline()))
    assert s.admit == () and s.job.kind == G.GATE


def test_unusable_golden_pages_hold_the_gate_with_a_false_condition():
    problem = PG.PagesProblem(PG.PAGES_MISSING, "spec.rollout.qualityGate.goldenPages.configMapName: gone")
    s = step([Pod("new-1", "new", awaiting_gate=True)], pages=problem)
    assert s.job is None and s.condition == ("False", PG.PAGES_MISSING, problem.message)


def test_once_the_passed_revision_is_last_good_its_outputs_are_the_baseline():
    candidate = V.Recording("new", pages().digest, outputs(a_png="a", b_png="b"))
    s = step([], G.Outcome(None, V.Records(None, candidate)), phase="Healthy", last_good="new")
    assert s.records.baseline == candidate


def test_without_a_gate_only_the_last_good_revisions_pods_are_admitted_and_nothing_runs():
    s = step([Pod("old-1", "old", awaiting_gate=True), Pod("new-1", "new", awaiting_gate=True)], gate=None)
    assert s.admit == ("old-1",) and s.job is None and s.condition is None


def test_the_gate_extends_the_startup_budget_by_two_timeouts_per_page():
    assert G.budget_seconds(GATE, pages()) == 2 * 2 * GATE.timeout_seconds
    assert G.budget_seconds(None, pages()) == 0.0


def test_a_new_attempt_clears_the_failed_verdict_of_an_earlier_one():
    failed = {"revision": "bad", "attempt": "2026-12-01T00:00:00.000000Z", "phase": G.FAILED,
              "reason": G.REASON_QUALITY_REGRESSION, "message": "page a.png: distance 1.0"}
    back = step([Pod("old-1", "old", ready=True)], G.Outcome(failed, valid_baseline()), current_revision="old")
    assert back.record is None and back.condition is None and back.job is None
    kept = step([], G.Outcome(failed, valid_baseline()), phase="RolledBack", current_revision="old")
    assert kept.record == failed and kept.condition[:2] == ("False", G.REASON_QUALITY_REGRESSION)


# --------------------------------------------------------------------------- golden pages on the model PVC


def listed(*names: str, expected: dict[str, str] | None = None, size: int = 4) -> dict:
    return {"pages": [{"name": n, "size": size, "sha256": hashlib.sha256(n.encode()).hexdigest(),
                       "expected": (expected or {}).get(n)} for n in names]}


def test_a_pod_listing_gives_the_pages_their_hashes_and_the_pod_to_fetch_them_from():
    read = PG.read_listing(200, listed("a.png", "b.png", expected={"b.png": "two"}), "golden", "pod-1", "10.0.0.9")
    assert [(p.name, p.sha256, p.expected) for p in read.pages] == [
        ("a.png", hashlib.sha256(b"a.png").hexdigest(), None), ("b.png", hashlib.sha256(b"b.png").hexdigest(), "two")]
    assert read.source == "10.0.0.9"


def test_the_same_pages_have_the_same_digest_in_a_configmap_and_on_the_pvc():
    from_cm = PG.read_pages(golden({"a.png": b"a.png"}, {"a.png": "A"}), "golden", settings="s")
    from_pvc = PG.read_listing(200, listed("a.png", expected={"a.png": "A"}), "golden", "pod", "ip", settings="s")
    assert from_cm.digest == from_pvc.digest
    changed = PG.read_listing(200, listed("a.png", expected={"a.png": "B"}), "golden", "pod", "ip", settings="s")
    assert changed.digest != from_pvc.digest  # a changed expected text is re-recorded, as in a ConfigMap


@pytest.mark.parametrize("code, body, reason", [
    (404, {"error": {"type": "golden_pages_missing", "message": "/models/golden: no such folder"}}, PG.PAGES_MISSING),
    (413, {"error": {"type": "golden_pages_too_large", "message": "more than 16"}}, PG.PAGES_TOO_LARGE),
    (422, {"error": {"type": "golden_pages_invalid", "message": "a.png is a symbolic link"}}, PG.PAGES_INVALID),
    (404, {"detail": "Not Found"}, PG.PAGES_MISSING),  # a server image without the endpoint
])
def test_a_refused_listing_is_a_problem_naming_the_field_the_path_and_the_pod(code, body, reason):
    problem = PG.read_listing(code, body, "golden", "pod-1", "10.0.0.9")
    assert problem.reason == reason
    assert problem.message.startswith("spec.rollout.qualityGate.goldenPages.pvcPath: golden on pod pod-1")


@pytest.mark.parametrize("body, reason", [
    (listed(*(f"p{i}.png" for i in range(MAX_GOLDEN_PAGES + 1))), PG.PAGES_TOO_LARGE),
    (listed("a.png", "b.png", size=MAX_GOLDEN_BYTES // 2 + 1), PG.PAGES_TOO_LARGE),
    (listed("a.png", expected={"a.png": "x" * (MAX_PAGE_TEXT_CHARS + 1)}), PG.PAGES_TOO_LARGE),
    ({"pages": []}, PG.PAGES_INVALID),
    ({"pages": [{"name": "a.png", "size": 1, "sha256": "not-a-hash"}]}, PG.PAGES_INVALID),
])
def test_a_listing_beyond_the_bounds_is_refused_as_a_configmap_would_be(body, reason):
    assert PG.read_listing(200, body, "golden", "pod", "ip").reason == reason


def test_a_pod_that_cannot_say_yet_gives_no_pages_and_no_problem():
    assert PG.read_listing(503, {"error": {"type": "model_loading"}}, "golden", "pod", "ip") is None


def test_the_pages_are_listed_by_the_pod_the_gate_judges():
    pods = [Pod("old", "r1", ready=True), Pod("new-b", "r2", awaiting_gate=True), Pod("new-a", "r2", ready=True)]
    assert PG.pages_pod(pods, "r2").name == "new-b"
    assert PG.pages_pod(pods[:1], "r2") is None


def test_pvc_pages_not_listed_yet_wait_for_the_revisions_pod():
    step = G.next_step(G.GateInputs(S.QualityGate(pvc_path="golden"), None), G.Outcome(None, V.Records()),
                       [Pod("old", "r1", ready=True)],
                       RolloutStatus(current_revision="r2", last_good_revision="r1", rollout_started=ATTEMPT,
                                     phase="Progressing"))
    assert step.job is None and step.admit == ()
    assert step.condition == ("Unknown", "WaitingForPod", "waiting for a pod of revision r2 to load its model")


def test_a_gate_left_waiting_by_a_rollback_no_longer_reports_waiting():
    """A crash rolled the new revision back before a pod loaded its model: its Waiting step is
    history, so the condition says nothing awaits the gate instead of waiting forever."""
    waiting = {"revision": "new", "attempt": ATTEMPT, "phase": G.WAITING, "message": "waiting for a pod"}
    s = step([Pod("old-1", "old", ready=True)], outcome=G.Outcome(waiting, V.Records()), phase="RolledBack",
             current_revision="old")
    assert s.job is None and s.condition[:2] == ("True", "NoRevisionPending")
    assert "revision new left the rollout" in s.condition[2]
    busy = step([Pod("new-1", "new", awaiting_gate=True, ip="10.0.0.9")], outcome=G.Outcome(waiting, V.Records()))
    assert busy.condition[1] != "NoRevisionPending"  # while the rollout goes on, it still waits
