"""The one decision of a rollout: the revisions' state machine (machine.py) with the quality
gate's states (gate.py) around it. Pure.

In order:
1. a finished gate job is concluded against the state before this decision (a verdict for the
   revision being rolled out, in this attempt, on these golden pages);
2. a new revision whose golden pages cannot be used is held (it does not start rolling out;
   what runs stays judged as before); otherwise the revisions' machine advances, with the gate's
   verdict as one more failure signal, and a gated pod's startup budget holding the gate's time;
3. the gate's next step follows the decision: pods to admit, a job to run, status.qualityGate
   and the QualityGate condition.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from . import gate as G
from .machine import advance, hold
from .model import Decision, EventSpec, Observed, Policy, RolloutStatus
from .pages import PagesProblem


@dataclass(frozen=True)
class Inputs:
    desired_revision: str  # the hash of the pod template the spec renders now
    prior: RolloutStatus  # as persisted in the status
    observed: Observed
    policy: Policy  # the spec's rollout settings (the gate's time is added here)
    now: datetime
    gate: G.GateInputs = G.GateInputs()


@dataclass(frozen=True)
class Outcome:
    decision: Decision
    gate: G.Step  # what the gate does next
    held: bool = False  # the desired revision waits for usable golden pages
    gate_events: tuple[EventSpec, ...] = ()  # the gate's own (a pass)

    @property
    def events(self) -> tuple[EventSpec, ...]:
        return self.decision.events + self.gate_events


def decide(inputs: Inputs) -> Outcome:
    gate, prior = inputs.gate, inputs.prior
    concluded = G.conclude(gate, prior)
    policy = replace(inputs.policy, gate_seconds=G.budget_seconds(gate.spec, gate.pages))
    held = isinstance(gate.pages, PagesProblem) and inputs.desired_revision not in (
        prior.current_revision, prior.last_good_revision, prior.failed_revision)
    if held:
        assert isinstance(gate.pages, PagesProblem)
        decision = hold(inputs.desired_revision, prior, inputs.observed, policy, inputs.now, gate.pages.reason,
                        gate.pages.message)
    else:
        decision = advance(inputs.desired_revision, prior, inputs.observed, policy, inputs.now,
                           gate_failure=concluded.failure)
    step = G.next_step(gate, concluded, inputs.observed.pods, decision.status)
    verdict = concluded.verdict
    passed: tuple[EventSpec, ...] = ()
    if verdict is not None and verdict.passed and concluded.failure is None and gate.finished is not None:
        passed = (EventSpec("Normal", "QualityGatePassed", f"revision {gate.finished.job.revision}: {verdict.message}"),)
    return Outcome(decision, step, held, passed)
