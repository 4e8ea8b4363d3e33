"""Build the whole new status of an OcrService, and the Events of its transitions. Pure.

The reconcile hands over what it found and decided (a ``Report``, or an ``InvalidSpec``); the
runtime's conditions.diff then patches only what changed. Events are produced only for reported
transitions: the rollout state machine's own events, plus a change of the Ready / Available /
ScalingActive status.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Mapping

from ocr_limits.timestamps import iso
from ocr_operator.runtime import conditions as C
from ocr_operator.runtime.drift import parse_quantity
from ocr_operator.spec import OcrServiceSpec

from . import naming
from .conditions import AVAILABLE, DEGRADED, MODEL_FETCHING, ORDER, PROGRESSING, QUALITY_GATE, READY, SCALING_ACTIVE
from .render import modelimage
from .render import service as service_render
from .rollout import FAILED, NO_GOOD_REVISION, ROLLED_BACK, Decision
from .rollout import PROGRESSING as PHASE_PROGRESSING

FAILED_PHASES = (ROLLED_BACK, FAILED, NO_GOOD_REVISION)
SCALED_TO_ZERO = "ScaledToZero"
# An object with a child's name that this OcrService does not control: left untouched.
CHILD_CONFLICT = "ChildConflict"


@dataclass(frozen=True)
class Report:
    """What the reconcile of a valid spec found and decided, as the status reports it."""

    spec: OcrServiceSpec
    desired_revision: str
    decision: Decision
    deployment: Mapping[str, Any] | None = None  # ours, as applied or observed
    hpa: Mapping[str, Any] | None = None
    apply_errors: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()  # children whose names someone else's objects hold
    active_schedule: str | None = None
    scaled_to_zero_by: str | None = None  # the schedule window that scales the service to zero
    gate_record: Mapping[str, Any] | None = None  # status.qualityGate
    gate_condition: tuple[str, str, str] | None = None  # the QualityGate condition (status, reason, message)
    fetch: Any = None  # spec.model.source.s3: fetchprogress.FetchReport (the ModelFetching condition)


@dataclass(frozen=True)
class InvalidSpec:
    """A spec that cannot be rendered: what the status says instead (the revisions are kept)."""

    error: str
    deployment: Mapping[str, Any] | None = None


def _fmt_quantity(value: Any) -> str:
    q = parse_quantity(value)
    if q is None:
        return str(value)
    return str(int(q)) if q == int(q) else f"{float(q):.1f}"


def gpu_utilization(spec: OcrServiceSpec, hpa: Mapping[str, Any] | None) -> str | None:
    if spec.autoscaling is None:
        return None
    target = _fmt_quantity(spec.autoscaling.target_value())
    current = "<unknown>"
    for metric in ((hpa or {}).get("status") or {}).get("currentMetrics") or ():
        pods = metric.get("pods") or {}
        if (pods.get("metric") or {}).get("name") == spec.autoscaling.metric.name:
            value = (pods.get("current") or {}).get("averageValue")
            if value is not None:
                current = _fmt_quantity(value)
    return f"{current}/{target}"


def scaling_condition(spec: OcrServiceSpec, hpa: Mapping[str, Any] | None) -> C.Condition | None:
    """ScalingActive copied from the HPA itself (reason FailedGetPodsMetric when the metric is missing)."""
    if spec.autoscaling is None:
        return None
    hpa_cond = C.get(((hpa or {}).get("status") or {}).get("conditions"), "ScalingActive")
    if hpa_cond is None:
        return C.Condition(SCALING_ACTIVE, C.UNKNOWN, "WaitingForAutoscaler",
                           "the HorizontalPodAutoscaler has not reported yet")
    return C.Condition(SCALING_ACTIVE, hpa_cond.get("status") or C.UNKNOWN, hpa_cond.get("reason") or "Unknown",
                       hpa_cond.get("message") or "")


def build(owner: Mapping[str, Any], report: Report | InvalidSpec, *,
          now: dt.datetime) -> tuple[dict[str, Any], list[tuple[C.Condition, str | None]]]:
    """The complete new status and the condition transitions it reports."""
    md = owner["metadata"]
    old = owner.get("status") or {}
    generation = md.get("generation") or 0
    name = md["name"]
    conds: list[C.Condition] = []
    new: dict[str, Any] = {"observedGeneration": generation, "selector": naming.selector_string(name)}

    dep = report.deployment or {}
    dstatus = dep.get("status") or {}
    replicas = int(dstatus.get("replicas") or 0)
    ready = int(dstatus.get("readyReplicas") or 0)
    updated = int(dstatus.get("updatedReplicas") or 0)
    desired = (dep.get("spec") or {}).get("replicas")
    desired = int(desired) if desired is not None else 0
    new.update(replicas=replicas, readyReplicas=ready, updatedReplicas=updated, desiredReplicas=desired,
               replicaSummary=f"{ready}/{desired}")

    if isinstance(report, InvalidSpec):
        msg = f"the spec cannot be rendered: {report.error}"
        conds += [
            C.Condition(READY, C.FALSE, "InvalidSpec", msg),
            C.Condition(PROGRESSING, C.FALSE, "InvalidSpec", msg),
            C.Condition(DEGRADED, C.TRUE, "InvalidSpec", msg),
        ]
        # Keep what the last valid spec reported about revisions and the rollout.
        for key in ("currentRevision", "desiredRevision", "lastGoodRevision", "failedRevision", "failedReason",
                    "failedMessage", "rollout", "url", "gpuUtilization", "activeSchedule", "qualityGate", "model"):
            if key in old:
                new[key] = old[key]
    else:
        spec, decision = report.spec, report.decision
        apply_errors, conflicts = report.apply_errors, report.conflicts
        scaled_to_zero_by = report.scaled_to_zero_by
        rstatus = decision.status
        summary = {k: v for k, v in rstatus.summary().items() if v is not None}
        new.update(summary)
        new["currentRevision"] = decision.target_revision
        new["desiredRevision"] = report.desired_revision
        new["rollout"] = {k: v for k, v in rstatus.to_status().items() if v is not None}
        new["url"] = service_render.url(owner, spec)
        template = (dep.get("spec") or {}).get("template")
        if template:
            new["model"] = modelimage.running_model(template)
        util = gpu_utilization(spec, report.hpa)
        if util is not None:
            new["gpuUtilization"] = util
        if report.active_schedule:
            new["activeSchedule"] = report.active_schedule

        live_rev = (dep.get("metadata", {}).get("annotations") or {}).get(naming.REVISION_KEY)
        dep_current = (dep.get("metadata") or {}).get("generation") == dstatus.get("observedGeneration")
        problems = [*apply_errors, *conflicts]
        phase = rstatus.phase
        if apply_errors:
            ready_c = C.Condition(READY, C.FALSE, "ApplyFailed", "; ".join(apply_errors))
        elif conflicts:
            ready_c = C.Condition(READY, C.FALSE, CHILD_CONFLICT, "; ".join(conflicts))
        elif phase in FAILED_PHASES:
            ready_c = C.Condition(READY, C.FALSE, phase, decision.degraded.message)
        elif not dep:
            ready_c = C.Condition(READY, C.FALSE, "WaitingForDeployment", "the Deployment does not exist yet")
        elif live_rev != decision.target_revision or not dep_current or updated < desired or replicas > desired:
            ready_c = C.Condition(READY, C.FALSE, "RolloutInProgress",
                                  f"revision {decision.target_revision}: {updated}/{desired} pods updated, {ready} Ready")
        elif ready < desired:
            ready_c = C.Condition(READY, C.FALSE, "ReplicasNotReady", f"{ready}/{desired} pods Ready")
        elif phase == PHASE_PROGRESSING and rstatus.ready_since is None:
            # The Deployment counts the pods Ready before their own watch events came (or the
            # other way round): Ready turns True with the settle period's start, in one write.
            ready_c = C.Condition(READY, C.FALSE, "ReplicasNotReady",
                                  f"{ready}/{desired} pods Ready per the Deployment; waiting for the pods' reports")
        elif desired == 0 and scaled_to_zero_by:
            ready_c = C.Condition(READY, C.TRUE, SCALED_TO_ZERO,
                                  f"schedule window {scaled_to_zero_by} scales to zero (spec.autoscaling.schedules); "
                                  "the first minute after it ends restores minReplicas")
        elif desired == 0:
            ready_c = C.Condition(READY, C.TRUE, SCALED_TO_ZERO, "replicas is 0")
        else:
            ready_c = C.Condition(READY, C.TRUE, "AllReplicasReady",
                                  f"{ready}/{desired} pods of revision {decision.target_revision} Ready")
        conds.append(ready_c)
        prog = decision.progressing
        conds.append(C.Condition(PROGRESSING, prog.status, prog.reason, prog.message))
        deg = decision.degraded
        if deg.status != C.TRUE and problems:
            conds.append(C.Condition(DEGRADED, C.TRUE, "ApplyFailed" if apply_errors else CHILD_CONFLICT,
                                     "; ".join(problems)))
        else:
            conds.append(C.Condition(DEGRADED, deg.status, deg.reason, deg.message))
        scaling = scaling_condition(spec, report.hpa)
        if scaled_to_zero_by:
            scaling = C.Condition(SCALING_ACTIVE, C.FALSE, SCALED_TO_ZERO,
                                  f"schedule window {scaled_to_zero_by} scales to zero: no HorizontalPodAutoscaler "
                                  "until it ends")
        if scaling is not None:
            conds.append(scaling)
        if report.gate_record:
            new["qualityGate"] = dict(report.gate_record)
        if report.gate_condition is not None:
            conds.append(C.Condition(QUALITY_GATE, *report.gate_condition))
        if report.fetch is not None:
            conds.append(C.Condition(MODEL_FETCHING, *report.fetch.condition))
            if report.fetch.pod is not None and (p := report.fetch.progress) is not None:
                new["modelFetch"] = {"pod": report.fetch.pod, "percent": p.percent, "bytes": p.bytes,
                                     "totalBytes": p.total_bytes, "files": p.files, "totalFiles": p.total_files}

    if desired == 0 and isinstance(report, Report) and dep:
        by = report.scaled_to_zero_by
        why = f"schedule window {by} scales to zero" if by else "no pods are wanted"
        conds.append(C.Condition(AVAILABLE, C.FALSE, SCALED_TO_ZERO, why))
    elif ready >= 1:
        conds.append(C.Condition(AVAILABLE, C.TRUE, "MinimumReplicasAvailable", f"{ready} pod(s) Ready and serving"))
    else:
        conds.append(C.Condition(AVAILABLE, C.FALSE, "NoReplicasReady", "no pod is Ready to serve"))

    new["conditions"], changed = C.merge(old.get("conditions"), conds, generation=generation, now=iso(now),
                                         order=ORDER)
    return new, changed


# Status fields that only count or describe the Deployment's pods (and the HPA's reading): a
# patch that changes nothing else may wait a moment (see `urgent`).
COUNTS = frozenset({"replicas", "readyReplicas", "updatedReplicas", "desiredReplicas", "replicaSummary",
                    "gpuUtilization", "modelFetch"})


# Conditions copied from another controller's object (the HPA's ScalingActive): the source
# is the truth, our copy may lag like the counts.
MIRRORED = frozenset({SCALING_ACTIVE})


def _condition_states(conds: Any) -> dict[Any, Any]:
    """Condition type -> status, leaving out the mirrored ones."""
    return {c.get("type"): c.get("status") for c in conds or ()
            if isinstance(c, Mapping) and c.get("type") not in MIRRORED}


# A new object's first report may say no more than this (condition -> status, reason or None for
# any) and still wait (`first_report`): its first rollout has begun, nothing is wrong yet.
FIRST_REPORT = {READY: ("False", "RolloutInProgress"), PROGRESSING: ("True", "RolloutInProgress"),
                DEGRADED: ("False", None), AVAILABLE: ("False", None), SCALING_ACTIVE: (None, None)}


def first_report(old: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> bool:
    """Whether `patch` is a new object's first status (none was written: no observedGeneration)
    saying only that its first rollout has begun (FIRST_REPORT).

    Such a report may wait a moment like counts (`urgent`): the Deployment's pods usually report
    Ready within it, and the two are then one write. A status patch of the custom resource costs
    the API server five to six times a ConfigMap's apply; at 500 OcrServices created at once this
    write was one of the operator's 3.7 status patches per object, all inside the storm that
    decides the last one's Ready. What the report holds is decided again, from the same empty
    status, by the reconcile that writes it: its rollout record (startedAt is then that
    reconcile's time) and its RolloutStarted Event (held with it: reconcile.py)."""
    if (old or {}).get("observedGeneration") is not None:
        return False
    conds = {c.get("type"): (c.get("status"), c.get("reason"))
             for c in patch.get("conditions") or () if isinstance(c, Mapping)}
    if READY not in conds or not set(conds) <= set(FIRST_REPORT):
        return False
    return all(want_status in (None, conds[kind][0]) and want_reason in (None, conds[kind][1])
               for kind, (want_status, want_reason) in FIRST_REPORT.items() if kind in conds)


def urgent(old: Mapping[str, Any] | None, patch: Mapping[str, Any]) -> bool:
    """Whether the status patch `patch` (`diff(old, ...)`) must be written at once.

    Everything is, except counts (COUNTS), conditions mirrored from the HPA (MIRRORED) and the
    reason and message of a condition whose status stays the same: a condition's status, the
    rollout record, the revisions, observedGeneration and the URL are written in the reconcile
    that found them. A patch of counts, reasons and messages alone may be held back for a
    moment (the controller's STATUS_COALESCE_SECONDS) and written with whatever comes next: a
    new Deployment reports its pods created (Ready=False RolloutInProgress -> ReplicasNotReady),
    then Ready, within seconds, and each report would otherwise cost a status write of its own.
    So may a new object's first report of its first rollout (`first_report`)."""
    if first_report(old, patch):
        return False
    for key, value in patch.items():
        if key in COUNTS:
            continue
        if key == "conditions":
            if _condition_states((old or {}).get("conditions")) != _condition_states(value):
                return True
            continue
        return True
    return False


def transition_events(changed: list[tuple[C.Condition, str | None]], *,
                      rollout_tells: bool = False) -> list[tuple[str, str, str]]:
    """(type, reason, message) Events for condition transitions worth telling a human about.

    Progressing/Degraded transitions are told by the rollout state machine's own events; so is
    Ready turning True or giving way to RolloutInProgress during a rollout (`rollout_tells`: the
    state machine's RolloutStarted and RolloutSucceeded say it), so a new OcrService or an
    upgrade posts two Normal events, not four. Outside a rollout (pods lost and back, a
    schedule window) Ready's transitions are told here, and ScalingActive turning False after
    it was True."""
    events = []
    for cond, previous in changed:
        if cond.type == READY:
            if cond.status == C.TRUE:
                if not rollout_tells:
                    events.append(("Normal", "Ready", cond.message))
            elif cond.reason == "RolloutInProgress" and previous == C.TRUE:
                # An upgrade starting is routine: the old pods keep serving (spec.rollout.maxUnavailable).
                if not rollout_tells:
                    events.append(("Normal", cond.reason, cond.message))
            elif cond.reason == CHILD_CONFLICT:
                pass  # the reconcile tells each conflict, naming the object, whenever it finds one
            elif previous == C.TRUE or cond.reason in ("InvalidSpec", "ApplyFailed"):
                events.append(("Warning", f"NotReady{cond.reason}" if cond.reason in ("ReplicasNotReady",) else cond.reason,
                               cond.message))
        elif cond.type == QUALITY_GATE and cond.status == C.FALSE and cond.reason.startswith("GoldenPages"):
            # Unusable golden pages hold every rollout; a failed gate is told by the rollback's event.
            events.append(("Warning", cond.reason, cond.message))
        elif cond.type == AVAILABLE and previous == C.TRUE and cond.status != C.TRUE:
            # Scaling to zero on purpose (a schedule window, replicas 0) is routine, not a warning.
            events.append(("Normal" if cond.reason == SCALED_TO_ZERO else "Warning", cond.reason, cond.message))
        elif (cond.type == SCALING_ACTIVE and cond.status == C.FALSE and cond.reason != SCALED_TO_ZERO
              and previous == C.TRUE):
            # Only autoscaling that worked and stopped: a new HPA reports FailedGetPodsMetric or
            # InvalidSelector until its pods' first metrics are scraped, and the HPA posts its own
            # Warning Events (same name) while it cannot read them; the condition shows it here.
            events.append(("Warning", cond.reason, cond.message))
    return events
