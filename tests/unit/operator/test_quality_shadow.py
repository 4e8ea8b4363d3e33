"""Shadow pages (spec.rollout.qualityGate.shadow), the pure half: the serving pods' answers read
back, the noise floor, the sample's verdict against its thresholds, and how it joins the golden
pages' in the gate's conclusion, status and startup budget (rollout/shadow.py, rollout/gate.py)."""

from __future__ import annotations

from ocr_limits.quality import MAX_SHADOW_PAGES
from ocr_operator import spec as S
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import shadow as SH
from ocr_operator.ocrservice.rollout import verdict as V
from tests.unit.operator.test_quality import ATTEMPT, Pod, gate_job, outputs, pages, rolling, step

SHADOW = S.Shadow(max_mean_distance=0.05, max_page_distance=0.2)
GATE = S.QualityGate(config_map="golden", max_mean_distance=0.5, max_page_distance=0.9, shadow=SHADOW)


def copy(distance: float | None, sha: str = "a", *, error: str | None = None, outcome: str | None = "ok") -> dict:
    """One copy as a serving pod's GET /v1/shadow lists it."""
    return {"sha256": sha * 64, "servingSha256": "s" * 64, "candidateSha256": "c" * 64, "distance": distance,
            "status": None, "servingOutcome": "ok", "candidateOutcome": outcome, "seconds": 0.5, "error": error}


def sample(*copies: dict, noise: tuple[float, ...] = (), sampled: int | None = None) -> SH.ShadowResult:
    body = {"pages": list(copies), "noise": [{"sha256": "n" * 64, "distance": d} for d in noise],
            "sampled": len(copies) if sampled is None else sampled}
    return SH.merge([SH.read_answer("old-1", body)], seconds=12.5)


def baseline() -> V.Records:
    return V.Records(V.Recording("old", pages().digest, outputs(a_png="hello", b_png="world")))


def conclude(shadow: SH.ShadowResult | None, golden=("hello", "world"), gate=GATE) -> G.Outcome:
    result = G.Result(gate_job(), outputs(a_png=golden[0], b_png=golden[1]), seconds=3.0, shadow=shadow)
    return G.conclude(G.GateInputs(gate, pages(), baseline(), None, result), rolling())


# --------------------------------------------------------------------------- the verdict


def test_the_same_answers_pass_with_distance_zero_and_say_how_many_pages_were_judged():
    v = SH.judge(sample(copy(0.0, "a"), copy(0.0, "b")), GATE)
    assert v.passed and (v.pages, v.mean, v.worst) == (2, 0.0, 0.0)
    assert v.message.startswith("shadow sample: 2 pages judged"), v.message


def test_a_page_over_max_page_distance_fails_naming_the_page_by_its_hash_and_the_threshold():
    v = SH.judge(sample(copy(0.0, "a"), copy(0.3, "b")), GATE)
    assert not v.passed
    assert v.message.startswith("shadow sample: shadow page bbbbbbbbbbbb: distance 0.3000 > maxPageDistance 0.2"), \
        v.message


def test_a_mean_over_max_mean_distance_fails_even_when_every_page_is_within_its_own():
    v = SH.judge(sample(copy(0.1, "a"), copy(0.1, "b")), GATE)
    assert not v.passed and v.message.startswith("shadow sample: mean distance 0.1000 over 2 pages > maxMeanDistance 0.05")


def test_the_noise_floor_is_the_worst_noise_distance_and_is_taken_off_each_page():
    v = SH.judge(sample(copy(0.12, "a"), copy(0.02, "b"), noise=(0.05, 0.1)), GATE)
    assert v.noise_floor == 0.1 and (v.worst, v.mean) == (0.02, 0.01) and v.passed


def test_unset_shadow_thresholds_are_the_gates_own():
    gate = S.QualityGate(config_map="golden", max_mean_distance=0.7, max_page_distance=0.6, shadow=S.Shadow())
    assert SH.judge(sample(copy(0.55)), gate).passed
    assert "maxPageDistance 0.6" in SH.judge(sample(copy(0.65)), gate).message


def test_no_page_judged_within_max_seconds_passes_on_the_golden_pages_and_says_so():
    v = SH.judge(sample(sampled=0), GATE)
    assert v.passed and v.pages == 0 and v.mean is None
    assert v.message == ("shadow sample: no page judged within maxSeconds 300 (0 sampled, 0 errors): "
                         "the golden pages alone decide")


def test_a_copy_without_an_answer_is_an_error_not_a_judged_page():
    v = SH.judge(sample(copy(None, "a", error="timeout"), copy(0.0, "b")), GATE)
    assert (v.pages, v.errors, v.sampled) == (1, 1, 2) and v.passed


def test_a_serving_pod_whose_shadow_endpoint_failed_is_counted_and_named():
    failed = SH.ShadowResult(errors=("pod old-2: PUT /v1/shadow: HTTP 404 shadow_unavailable",))
    v = SH.judge(SH.merge([failed, sample()]), GATE)
    assert v.passed and v.errors == 1 and "pod old-2: PUT /v1/shadow: HTTP 404" in v.message


def test_a_serving_pods_answer_is_read_up_to_max_shadow_pages():
    body = {"pages": [copy(0.0)] * (MAX_SHADOW_PAGES + 5), "noise": [], "sampled": MAX_SHADOW_PAGES + 5}
    assert len(SH.read_answer("old-1", body).pages) == MAX_SHADOW_PAGES


def test_an_answer_that_is_no_shadow_answer_is_an_error():
    assert SH.read_answer("old-1", ["x"]).errors == ("pod old-1: the shadow answer is not a JSON object with pages",)


# --------------------------------------------------------------------------- the gate's conclusion


def test_a_shadow_failure_fails_the_revision_with_quality_regression_naming_the_shadow_sample():
    out = conclude(sample(copy(0.4, "a")))
    assert out.failure.reason == G.REASON_QUALITY_REGRESSION
    assert out.failure.message.startswith("shadow sample: shadow page aaaaaaaaaaaa: distance 0.4000"), out.failure.message
    assert "golden pages: worst page" in out.failure.message  # the golden pages passed, and say how
    assert out.record["phase"] == G.FAILED and out.verdict.signal == SH.SIGNAL


def test_golden_pages_that_fail_fail_the_revision_whatever_the_shadow_sample_says():
    out = conclude(sample(copy(0.0)), golden=("zzzzz", "world"))
    assert out.failure.message.startswith("page a.png: distance 1.0000 > maxPageDistance 0.9")
    assert "; shadow sample: 1 pages judged" in out.failure.message


def test_a_passing_revision_reports_its_shadow_sample_in_the_status():
    out = conclude(sample(copy(0.0, "a"), copy(0.04, "b"), noise=(0.01,), sampled=3))
    assert out.failure is None and out.record["phase"] == G.PASSED
    assert {k: v for k, v in out.record["shadow"].items() if k != "message"} == {
        "pages": 2, "sampled": 3, "errors": 0, "meanDistance": 0.015, "worstDistance": 0.03, "noiseFloor": 0.01,
        "seconds": 12.5}
    assert out.record["message"].endswith(out.record["shadow"]["message"])


def test_the_first_revision_has_no_shadow_sample_and_says_so():
    out = conclude(None)
    assert out.failure is None
    assert out.record["shadow"]["message"] == ("shadow sample: not taken: no Ready pod of a last good revision to copy "
                                               "live requests from")


def test_a_looping_shadow_page_counts_in_the_gates_loop_rate():
    gate = S.QualityGate(config_map="golden", max_mean_distance=0.5, max_page_distance=0.9, max_loop_rate=0.25,
                         shadow=S.Shadow())
    out = conclude(sample(copy(0.0, "a", outcome="loop"), copy(0.0, "b")), gate=gate)  # golden pages: no outcome
    assert out.failure is not None and out.failure.message.startswith(
        "maxLoopRate: loop rate 0.5000 > 0.25 (1 of 2 pages loop: shadow page aaaaaaaaaaaa)"), out.failure.message


# --------------------------------------------------------------------------- the job and the budget


def test_the_gate_job_arms_every_ready_pod_of_the_last_good_revision():
    pods = [Pod("old-2", "old", ready=True, ip="10.0.0.3"), Pod("old-1", "old", ready=True, ip="10.0.0.2"),
            Pod("old-3", "old", ready=True, deleting=True), Pod("old-4", "old", ready=False),
            Pod("new-1", "new", awaiting_gate=True, ip="10.0.0.9")]
    s = step(pods, G.Outcome(None, baseline()), gate=GATE)
    assert s.job.kind == G.GATE and s.job.serving == (("old-1", "10.0.0.2"), ("old-2", "10.0.0.3"))


def test_a_change_of_the_serving_pods_does_not_change_the_jobs_key():
    one = step([Pod("old-1", "old", ready=True), Pod("new-1", "new", awaiting_gate=True)],
               G.Outcome(None, baseline()), gate=GATE).job
    two = step([Pod("old-1", "old", ready=True), Pod("old-2", "old", ready=True), Pod("new-1", "new", awaiting_gate=True)],
               G.Outcome(None, baseline()), gate=GATE).job
    assert one.serving != two.serving and one.key == two.key and one.attempt == ATTEMPT


def test_shadow_pages_extend_the_startup_budget_by_max_seconds():
    assert G.budget_seconds(GATE, pages()) == 2 * 2 * GATE.timeout_seconds + SHADOW.max_seconds
