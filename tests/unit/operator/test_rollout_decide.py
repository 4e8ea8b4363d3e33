"""The one rollout decision (rollout/decide.py): the quality gate's states around the revisions'
state machine, from typed inputs, with the clock passed in."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone

from ocr_operator import spec as S
from ocr_operator.ocrservice import rollout
from ocr_operator.ocrservice.rollout import Inputs, Observed, PodView, Policy, RolloutStatus, decide
from ocr_operator.ocrservice.rollout import gate as G
from ocr_operator.ocrservice.rollout import pages as PG
from ocr_operator.ocrservice.rollout import verdict as V
from ocr_operator.ocrservice.rollout.machine import advance

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
STARTED = "2026-12-02T11:59:00.000000Z"
OLD, NEW = "aaaaaaaaaa", "bbbbbbbbbb"
GATE = S.QualityGate(config_map="golden", max_mean_distance=0.05, max_page_distance=0.2)
PAGES = PG.read_pages({"binaryData": {"a.png": base64.b64encode(b"A").decode()}}, "golden")
POLICY = Policy(failure_threshold=3, period_seconds=2, model_load_timeout_seconds=10, settle_seconds=5)
ROLLING = RolloutStatus(current_revision=NEW, last_good_revision=OLD, phase=rollout.PROGRESSING,
                        rollout_started=STARTED)
HEALTHY = RolloutStatus(current_revision=OLD, last_good_revision=OLD, phase=rollout.HEALTHY, rollout_started=STARTED)


def pod(name: str, revision: str, *, ready: bool = False, awaiting: bool = False) -> PodView:
    return PodView(name=name, revision=revision, phase="Running", ready=ready, ready_transition=T0,
                   created=T0 - timedelta(seconds=5), awaiting_gate=awaiting, ip="10.0.0.2")


def seen(*pods: PodView, revision: str = NEW) -> Observed:
    return Observed(deployment_revision=revision, desired_replicas=1, progress_deadline_exceeded=False, pods=pods)


def finished(text: str) -> G.Result:
    job = G.Job(G.GATE, NEW, "new-1", "10.0.0.2", STARTED, PAGES.digest)
    return G.Result(job, (V.Output.of("a.png", text, 3),), None, 1.0)


def baseline() -> V.Records:
    return V.Records(V.Recording(OLD, PAGES.digest, (V.Output.of("a.png", "hello world", 3),)))


def gated(result: G.Result | None = None, pages=PAGES) -> G.GateInputs:
    return G.GateInputs(GATE, pages, baseline(), None, result)


def test_a_gate_verdict_worse_than_the_baseline_rolls_the_revision_back_in_the_same_decision():
    out = decide(Inputs(NEW, ROLLING, seen(pod("new-1", NEW, awaiting=True)), POLICY, T0, gated(finished("xxxxx"))))
    assert out.decision.status.phase == rollout.ROLLED_BACK and out.decision.target_revision == OLD
    assert out.decision.status.failed_reason == G.REASON_QUALITY_REGRESSION
    assert out.gate.record["phase"] == G.FAILED and out.gate.admit == ()
    assert [e.reason for e in out.events] == ["RolledBack"]


def test_a_passing_verdict_admits_the_revisions_pods_and_tells_it_once():
    out = decide(Inputs(NEW, ROLLING, seen(pod("new-1", NEW, awaiting=True)), POLICY, T0,
                        gated(finished("hello world"))))
    assert out.decision.status.phase == rollout.PROGRESSING and out.gate.admit == ("new-1",)
    assert out.gate.record["phase"] == G.PASSED and out.gate.condition[0] == "True"
    assert [e.reason for e in out.events] == ["QualityGatePassed"]


def test_unusable_golden_pages_hold_a_new_revision_and_what_runs_stays():
    problem = PG.PagesProblem(PG.PAGES_MISSING, "spec.rollout.qualityGate.goldenPages.configMapName: gone")
    out = decide(Inputs(NEW, HEALTHY, seen(pod("old-1", OLD, ready=True), revision=OLD), POLICY, T0,
                        gated(pages=problem)))
    assert out.held and out.decision.target_revision == OLD
    assert (out.decision.progressing.status, out.decision.progressing.reason) == ("False", PG.PAGES_MISSING)
    assert out.gate.condition == ("False", PG.PAGES_MISSING, problem.message) and out.gate.job is None


def test_the_gate_asks_for_its_time_in_the_new_pods_startup_budget():
    """A gated pod not Ready 20 s after its creation: past the 16 s budget without the gate,
    within it with the gate's two timeouts per page."""
    late = PodView(name="new-1", revision=NEW, phase="Running", ready=False, ready_transition=None,
                   created=T0 - timedelta(seconds=20), awaiting_gate=True, ip="10.0.0.2")
    ungated = decide(Inputs(NEW, ROLLING, seen(late), POLICY, T0))
    assert ungated.decision.status.failed_reason == "ReadinessTimeout"
    out = decide(Inputs(NEW, ROLLING, seen(late), POLICY, T0, gated()))
    assert out.decision.status.phase == rollout.PROGRESSING and out.gate.job.kind == G.GATE


def test_without_a_gate_the_decision_is_the_revisions_machines_and_the_gate_does_nothing():
    observed = seen(pod("new-1", NEW, ready=True), pod("old-1", OLD, awaiting=True))
    out = decide(Inputs(NEW, ROLLING, observed, POLICY, T0))
    assert out.decision == advance(NEW, ROLLING, observed, POLICY, T0)
    assert out.gate == G.Step(admit=("old-1",)) and not out.held and out.events == out.decision.events
