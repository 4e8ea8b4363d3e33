"""The quality gate's states: a rollout's steps between "the new revision's pods are up" and "they
serve". Pure; decide.py runs them around the revisions' state machine, gaterun.py sends the pages.

Mechanism (spec.rollout.qualityGate; docs/concepts/quality-gate.md): the pods of a gated
OcrService carry the readiness gate ``GATE_CONDITION``. A pod of a new revision whose containers
are Ready stays out of the Service (the kubelet reports Ready False, reason
ReadinessGatesNotReady) and the Deployment makes no more progress (with spec.rollout.maxUnavailable
above 0, once that many old pods have stopped), so the old pods keep all the traffic. The gate then goes through its phases (status.qualityGate.phase):

- Waiting: for a pod of the revision to load its model, for usable golden pages, or for a Ready
  pod of the last good revision to record the baseline from;
- Recording: the last good revision's outputs on the golden pages are recorded (a RECORD job);
- Running: the pages are sent to the new revision's pod (a GATE job); with shadow pages the job
  first arms the Ready pods of the last good revision to copy live requests to it (shadow.py);
- Passed: every awaiting pod of the revision is admitted (its condition set True), the rollout
  goes on, and the outputs become the baseline once the revision is the last good one;
- Failed: the revision fails with QualityRegression or QualityGateError, and the revisions'
  state machine rolls it back as for a crash.

Every step is a function of the OcrService status, the quality ConfigMap and the pods, so an
operator restarted mid-gate sends the pages again and decides once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ocr_operator.spec import QualityGate

from .model import PROGRESSING, Failure, RolloutStatus
from .pages import GatePod, GoldenPages, PagesProblem, first_pod
from .shadow import ShadowResult, combine
from .shadow import judge as judge_shadow
from .verdict import Output, Recording, Records, Verdict, judge

# failed_reason values and QualityGate condition reasons (CamelCase, stable).
REASON_QUALITY_REGRESSION = "QualityRegression"
REASON_GATE_ERROR = "QualityGateError"

# status.qualityGate.phase
RUNNING, RECORDING, WAITING, PASSED, FAILED = "Running", "Recording", "Waiting", "Passed", "Failed"

GATE, RECORD = "gate", "record"


@dataclass(frozen=True)
class Job:
    """Send the golden pages to one pod. `kind` gate: judge its revision; record: its outputs
    become the baseline. `attempt` is the rollout's startedAt: a result of another attempt is
    never applied. `serving`: with shadow pages, the Ready pods of the last good revision (name,
    IP) the gate arms; not in `key`, so a change of the serving pods does not restart the job."""

    kind: str
    revision: str
    pod: str
    ip: str
    attempt: str | None
    digest: str
    serving: tuple[tuple[str, str], ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str | None, str]:
        return (self.kind, self.revision, self.pod, self.attempt, self.digest)


@dataclass(frozen=True)
class Result:
    """A finished job: each page's output, or the error that stopped it, the seconds it took, and
    with shadow pages what the serving pods recorded (None: no last good revision to copy from)."""

    job: Job
    outputs: tuple[Output, ...] = ()
    error: str | None = None
    seconds: float = 0.0
    shadow: ShadowResult | None = None


@dataclass(frozen=True)
class GateInputs:
    """What the gate knows at a reconcile: its spec (None: no gate), the golden pages (None: not
    read, or not listed yet), the quality ConfigMap's records, the persisted status.qualityGate,
    and a finished job's result that waits to be concluded."""

    spec: QualityGate | None = None
    pages: GoldenPages | PagesProblem | None = None
    records: Records = Records()
    record: Mapping[str, Any] | None = None
    finished: Result | None = None


@dataclass(frozen=True)
class Outcome:
    """A finished job applied to the state: the gate record for status.qualityGate, the records,
    and for a failed gate the failure the rollout fails the revision with."""

    record: dict[str, Any] | None
    records: Records
    failure: Failure | None = None
    verdict: Verdict | None = None


def conclude(gate: GateInputs, rollout: RolloutStatus) -> Outcome:
    """Apply the finished job, if it still belongs to the state (`rollout`: before this
    reconcile's decision): a gate result for the revision being rolled out in this attempt, on
    these pages; a record result for the last good revision on these pages. Anything else is
    dropped (the spec moved on meanwhile)."""
    result, pages, records = gate.finished, gate.pages, gate.records
    prior = dict(gate.record) if gate.record else None
    if result is None or gate.spec is None or not isinstance(pages, GoldenPages) or result.job.digest != pages.digest:
        return Outcome(prior, records)
    job = result.job
    if job.kind == RECORD:
        if job.revision != rollout.last_good_revision or result.error is not None:
            return Outcome(prior, records)
        return Outcome(prior, Records(Recording(job.revision, job.digest, result.outputs), records.candidate))
    if (rollout.phase != PROGRESSING or job.revision != rollout.current_revision
            or job.attempt != rollout.rollout_started):
        return Outcome(prior, records)
    base = {"revision": job.revision, "attempt": job.attempt, "pagesDigest": job.digest, "pod": job.pod,
            "seconds": round(result.seconds, 2)}
    if result.error is not None:
        message = f"pod {job.pod} did not answer the golden pages: {result.error}"
        return Outcome({**base, "phase": FAILED, "reason": REASON_GATE_ERROR, "message": message}, records,
                       Failure(REASON_GATE_ERROR, message, job.pod))
    baseline = records.baseline if records.baseline is not None and records.baseline.digest == job.digest else None
    shadow = judge_shadow(result.shadow, gate.spec)
    verdict = combine(judge(result.outputs, pages, baseline, gate.spec, result.shadow.pages if result.shadow else ()),
                      shadow)
    record = {**base, "phase": PASSED if verdict.passed else FAILED, "against": verdict.against,
              "meanDistance": verdict.mean, "worstPage": verdict.worst_page, "worstDistance": verdict.worst,
              "pages": [{"name": n, "distance": d} for n, d in verdict.distances], "message": verdict.message}
    if shadow is not None:
        record["shadow"] = shadow.to_status()
    if not verdict.passed:
        return Outcome({**record, "reason": REASON_QUALITY_REGRESSION}, records,
                       Failure(REASON_QUALITY_REGRESSION, verdict.message, job.pod), verdict)
    candidate = Recording(job.revision, job.digest, result.outputs)
    return Outcome(record, Records(records.baseline, candidate), None, verdict)


@dataclass(frozen=True)
class Step:
    """What to do now: pods to admit (condition True), a job to run, the state to persist and
    the QualityGate condition (status, reason, message), or None without a gate."""

    admit: tuple[str, ...] = ()
    job: Job | None = None
    record: dict[str, Any] | None = None
    records: Records = Records()
    condition: tuple[str, str, str] | None = None


def _baseline_ok(records: Records, last_good: str | None, pages: GoldenPages) -> bool:
    b = records.baseline
    return b is not None and b.revision == last_good and b.digest == pages.digest


def next_step(gate: GateInputs, outcome: Outcome, pods: Iterable[GatePod], rollout: RolloutStatus) -> Step:
    """The gate's step after the rollout decided (`rollout`: the decision's status). Admitted:
    pods of the last good revision, and of the revision whose gate passed in this attempt;
    without a gate only the former (a rollback to a gated revision)."""
    pods = tuple(pods)
    pages = gate.pages
    revision, last_good, attempt = rollout.current_revision, rollout.last_good_revision, rollout.rollout_started
    progressing = rollout.phase == PROGRESSING
    record, records = outcome.record, outcome.records
    if progressing and record and record.get("phase") == FAILED and record.get("attempt") != attempt:
        record = None  # a new attempt (the spec went back, or on): the failure it reported is history
    passed = {last_good} - {None}
    if record and record.get("phase") == PASSED and record.get("attempt") == attempt:
        passed.add(record.get("revision"))
    admit = tuple(sorted(p.name for p in pods if p.awaiting_gate and not p.deleting and p.revision in passed))
    if gate.spec is None:
        return Step(admit, None, None, Records(), None)
    c = records.candidate
    if c is not None and last_good is not None and c.revision == last_good and records.baseline != c:
        records = Records(c, c)  # the revision that passed the gate is now the last good one
    step = Step(admit, None, record, records, _condition(record))
    gating = progressing and revision is not None and revision not in passed
    if isinstance(pages, PagesProblem):  # read because a rollout needs them: a gate waits, a new one is held
        held = {"revision": revision, "attempt": attempt, "phase": WAITING, "message": pages.message}
        return Step(admit, None, held if gating else record, records, ("False", pages.reason, pages.message))
    if not gating or revision is None:
        if not progressing and record and record.get("phase") in (WAITING, RUNNING, RECORDING):
            # The rollout ended (a crash rolled the revision back, or the spec went back) before its
            # gate decided: the persisted step is history, not something still being waited for.
            message = (f"no revision awaits the gate: revision {record.get('revision')} left the rollout "
                       f"before its gate decided; revision {revision} serves")
            return replace(step, condition=("True", "NoRevisionPending", message))
        return step
    if (record or {}).get("revision") == revision and record.get("attempt") == attempt \
            and record.get("phase") == FAILED:
        return step
    if pages is None:  # pages on the model PVC: listed by the revision's pod, not up yet
        return _waiting_for_pod(admit, revision, attempt, records)
    if pages.need_baseline and last_good is not None and not _baseline_ok(records, last_good, pages):
        source = first_pod(pods, last_good, ready=True)
        if source is None:
            message = (f"the golden pages changed (or were never recorded) and no Ready pod of the last good "
                       f"revision {last_good} can record them")
            return Step(admit, None, {"revision": revision, "attempt": attempt, "phase": WAITING, "message": message},
                        records, ("Unknown", "WaitingForBaseline", message))
        message = f"recording the last good revision {last_good}'s outputs on {len(pages.pages)} golden pages " \
                  f"from pod {source.name}"
        return Step(admit, Job(RECORD, last_good, source.name, source.ip or "", attempt, pages.digest),
                    {"revision": revision, "attempt": attempt, "phase": RECORDING, "pod": source.name,
                     "message": message}, records, ("Unknown", "RecordingBaseline", message))
    target = first_pod(pods, revision, ready=False)
    if target is None:
        return _waiting_for_pod(admit, revision, attempt, records)
    message = f"sending {len(pages.pages)} golden pages to pod {target.name} of revision {revision}"
    serving = _serving(pods, last_good) if gate.spec.shadow is not None else ()
    if serving:
        message += f", and copies of live requests from {len(serving)} pods of revision {last_good}"
    return Step(admit, Job(GATE, revision, target.name, target.ip or "", attempt, pages.digest, serving),
                {"revision": revision, "attempt": attempt, "phase": RUNNING, "pod": target.name, "message": message},
                records, ("Unknown", "GateRunning", message))


def _serving(pods: Iterable[GatePod], last_good: str | None) -> tuple[tuple[str, str], ...]:
    """The pods the shadow pages come from: every Ready pod of the last good revision with an IP."""
    return tuple(sorted((p.name, p.ip) for p in pods if last_good is not None and p.revision == last_good
                        and p.ready and not p.deleting and p.ip))


def _waiting_for_pod(admit: tuple[str, ...], revision: str, attempt: str | None, records: Records) -> Step:
    message = f"waiting for a pod of revision {revision} to load its model"
    return Step(admit, None, {"revision": revision, "attempt": attempt, "phase": WAITING, "message": message},
                records, ("Unknown", "WaitingForPod", message))


def _condition(record: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """The QualityGate condition a persisted verdict reports."""
    if not record:
        return None
    phase = record.get("phase")
    revision = record.get("revision")
    if phase == PASSED:
        return ("True", "GatePassed", f"revision {revision} passed: {record.get('message', '')}")
    if phase == FAILED:
        return ("False", record.get("reason") or REASON_QUALITY_REGRESSION,
                f"revision {revision} failed: {record.get('message', '')}")
    return ("Unknown", "GateRunning" if phase == RUNNING else phase or "Waiting", record.get("message") or "")


def budget_seconds(gate: QualityGate | None, pages: GoldenPages | PagesProblem | None) -> float:
    """Extra startup time a gated pod may take: recording the baseline and the gate itself, each
    at most one timeout per page (pages sent one at a time), and the shadow pages' maxSeconds."""
    if gate is None:
        return 0.0
    count = len(pages.pages) if isinstance(pages, GoldenPages) else 1
    return 2.0 * count * gate.timeout_seconds + (gate.shadow.max_seconds if gate.shadow is not None else 0.0)
