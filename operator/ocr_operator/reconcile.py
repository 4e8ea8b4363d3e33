"""One level-based, idempotent reconcile of one OcrService.

snapshot -> parse spec -> render -> rollout.decide -> plan -> apply -> status (+ events).
Called for every reason alike (create, update, restart, a child changed, a deadline); a call
that finds everything in shape makes no write at all. With spec.rollout.qualityGate the quality
gate (quality.py) is one more input of the decision and one more step after it: the golden
pages are read while a rollout needs them, a finished gate job's result is concluded before
rollout.decide, and after the status is written the pods of passed revisions are admitted (their
readiness-gate condition set) and the next job handed to the gate runner (gaterun.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import children, gaterun, naming, plan, quality, revisions, rollout, snapshot, status
from .apply import execute
from .cache import Store
from .gaterun import GateRunner, Target
from .kube import ApiError, Kube
from .render import render_all
from .spec import OcrServiceSpec, QualityGate, SpecError, parse

log = logging.getLogger(__name__)

# Full reconcile of every object this often even when nothing wakes it (a safety net for a
# missed watch event); deadlines and child events wake it much earlier.
RESYNC_SECONDS = float(os.environ.get("OCR_OPERATOR_RESYNC_SECONDS", "300"))


@dataclass
class Result:
    requeue_after: float | None = RESYNC_SECONDS
    writes: int = 0
    actions: list[str] = field(default_factory=list)
    status: dict[str, Any] | None = None  # the OcrService as returned by the status patch
    status_held: bool = False  # a patch of counts and messages only, held back (status.urgent)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message) to post


def policy(spec: OcrServiceSpec, gate_seconds: float = 0.0) -> rollout.Policy:
    r = spec.rollout
    return rollout.Policy(
        gate_seconds=gate_seconds,
        failure_threshold=r.health_check.failure_threshold,
        period_seconds=r.health_check.period_seconds,
        model_load_timeout_seconds=r.model_load_timeout_seconds,
        progress_deadline_seconds=r.progress_deadline_seconds,
        auto_rollback=r.auto_rollback,
        settle_seconds=r.settle_seconds,
        max_restarts=r.max_restarts,
        unschedulable_grace_seconds=r.unschedulable_grace_seconds,
    )


def _next_minute(now: dt.datetime) -> float:
    return 60.0 - now.second - now.microsecond / 1e6 + 0.5


async def _write_status(kube: Kube, owner: Mapping[str, Any], new: dict[str, Any], changed, events, result,
                        hold: float = 0.0, rollout_tells: bool = False):
    """Patch the status if it changed; the events go to the result (posted off this path).
    With `hold` > 0 a patch of counts and messages only (status.urgent) is not written now:
    the result asks to be woken in `hold` seconds, when it is written unless a later
    reconcile wrote it first. Its transitions' events wait with it (the reconcile that writes
    them finds them again)."""
    md = owner["metadata"]
    patch = status.diff(owner.get("status"), new)
    if patch is not None and hold > 0 and not status.urgent(owner.get("status"), patch):
        result.status_held = True
        result.events = list(events)
        return
    if patch is not None:
        result.status = await kube.merge_patch("OcrService", md["namespace"], md["name"], {"status": patch},
                                               subresource="status")
        result.writes += 1
    result.events = [*events, *status.transition_events(changed, rollout_tells=rollout_tells)]


def _untrusted_target(decision: rollout.Decision, fresh, history: revisions.History,
                      deployment: Mapping[str, Any] | None,
                      observed: rollout.Observed) -> tuple[dict[str, Any], rollout.Decision]:
    """The pod template to apply when the rollback target's stored template is missing or was
    rejected (its hash does not match: revisions.verified), and the decision to report. The
    Deployment already running the target (rolled back earlier) keeps its own template;
    otherwise the rollback is refused and the desired, failed, template stays."""
    target = decision.target_revision
    live = ((deployment or {}).get("spec") or {}).get("template")
    running = ((deployment or {}).get("metadata") or {}).get("annotations") or {}
    if live and running.get(naming.REVISION_KEY) == target and live.get("metadata", {}).get(
            "labels", {}).get(naming.REVISION_KEY) == target:
        return live, decision
    why = ("its stored pod template does not match its revision hash (the revision history was edited)"
           if target in history.rejected else "its pod template is not in the revision history")
    return fresh.pod_template, rollout.refuse_rollback(decision, fresh.revision, why, observed)


async def _confirm_creates(kube: Kube, actions: list[plan.Action], objects: Mapping[str, dict[str, Any] | None],
                           snap: snapshot.Snapshot, uid: str, namespace: str,
                           store: Store | None) -> list[plan.Action]:
    """A create the cache cannot vouch for is checked by name first, and planned again with
    what the GET finds. The start-up list and the watches select children by the managed-by
    label, so a same-named object of someone else looks absent to the cache; a forced apply
    would take it over (an ownerReference added: deleting the OcrService would then delete
    it). An apply without force is no check: it conflicts only on a field both set to other
    values, and merges into an object that shares none. One GET per create, none otherwise."""
    unsure = [a for a in actions if a.verb == plan.CREATE and a.kind not in snap.fetched]
    if not unsure:
        return actions
    found = await asyncio.gather(*(kube.get(children.BY_KEY[a.kind].kind, namespace, a.name) for a in unsure))
    again: dict[str, plan.Action] = {}
    for action, obj in zip(unsure, found):
        if obj is None:
            continue
        if store is not None:
            store.fetched((children.BY_KEY[action.kind].kind, namespace, action.name), obj)
        again[action.kind] = plan.plan_one(action.kind, objects[action.kind], obj, uid, action.name)
    return [again.get(a.kind, a) for a in actions]


def _target(spec: OcrServiceSpec) -> Target | None:
    """How the gate reaches a pod and what it asks: the gate's tokens and deadline, at most the
    server's own (spec.inference), so a gate request is one a client may send."""
    gate = spec.rollout.quality_gate
    if gate is None:
        return None
    return Target(spec.service.port, bool(spec.tls_secret_name), min(gate.max_new_tokens, spec.inference.max_new_tokens),
                  min(gate.timeout_seconds, spec.inference.timeout_seconds))


async def _golden_pages(kube: Kube, namespace: str, gate: QualityGate | None, target: Target | None,
                        desired_revision: str, prior: rollout.RolloutStatus, observed: rollout.Observed
                        ) -> quality.GoldenPages | quality.PagesProblem | None:
    """The golden pages, read (one GET) only while the gate may need them: a new revision to
    roll out, a rollout in progress, or a pod held back by the readiness gate. None otherwise.
    From a ConfigMap, or (goldenPages.pvcPath) as a pod of the desired revision lists them: the
    operator mounts no PVC, the pod has the model volume and serves the folder read-only."""
    if gate is None or target is None:
        return None
    settled = desired_revision == prior.current_revision and prior.phase != rollout.PROGRESSING
    refused = desired_revision == prior.failed_revision and prior.phase != rollout.PROGRESSING  # not retried
    if (settled or refused) and not any(p.awaiting_gate and not p.deleting for p in observed.pods):
        return None
    settings = f"maxNewTokens={target.max_new_tokens}"
    if gate.pvc_path is not None:  # listed by a pod of the revision (GOLDEN_DIR): none up yet, None
        pod = quality.pages_pod(observed.pods, desired_revision)
        answer = await gaterun.listing(pod.ip, target) if pod is not None and pod.ip else None
        return None if answer is None else quality.read_listing(*answer, gate.pvc_path, pod.name, pod.ip,
                                                                 settings=settings)
    return quality.read_pages(await kube.get("ConfigMap", namespace, gate.config_map), gate.config_map,
                              settings=settings)


def _render_records(owner: Mapping[str, Any], records: quality.Records) -> dict[str, Any] | None:
    """The quality ConfigMap (the last good revision's outputs and the candidate's), owned by
    the OcrService; None while nothing is recorded."""
    data = quality.records_data(records)
    if not data:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": naming.metadata(owner, naming.quality_name(owner["metadata"]["name"])), "data": data}


async def _admit(kube: Kube, namespace: str, pods: tuple[str, ...], now: dt.datetime) -> None:
    """Set the readiness-gate condition True on `pods` (a strategic merge patch of their
    status: the kubelet's conditions stay). A pod gone meanwhile is no error."""
    for pod in pods:
        patch = {"status": {"conditions": [{
            "type": naming.GATE_CONDITION, "status": "True", "reason": "QualityGatePassed",
            "message": "the quality gate passed this pod's revision", "lastTransitionTime": status.iso(now)}]}}
        try:
            await kube.strategic_patch("Pod", namespace, pod, patch, subresource="status")
        except ApiError as exc:
            if exc.status != 404:
                raise


async def reconcile(kube: Kube, owner: Mapping[str, Any], *, now: dt.datetime,
                    servicemonitor_available: bool = False, store: Store | None = None,
                    available: frozenset[str] | None = None, status_hold: float = 0.0,
                    gates: GateRunner | None = None) -> Result:
    """`available`: the optional child kinds the API serves (children.optional_kinds); by
    default ServiceMonitor when `servicemonitor_available`. `status_hold`: how long a status
    patch of counts and messages only may wait (0: written now). `gates`: the quality gate's
    runner (None: gate jobs are neither run nor concluded, pods of the last good revision are
    still admitted)."""
    if available is None:
        available = frozenset({"ServiceMonitor"}) if servicemonitor_available else frozenset()
    md = owner["metadata"]
    ns, name, uid = md["namespace"], md["name"], md["uid"]
    result = Result()
    if md.get("deletionTimestamp"):
        return Result(requeue_after=None)  # garbage collection removes the children

    try:
        spec = parse(owner.get("spec") or {})
    except SpecError as exc:
        snap = await snapshot.read(kube, ns, name, available=frozenset(), store=store)
        new, changed = status.build(owner, None, now=now, deployment=snap.deployment, spec_error=str(exc))
        await _write_status(kube, owner, new, changed, [], result)
        result.requeue_after = None
        return result

    snap = await snapshot.read(kube, ns, name, available=available, store=store)
    fresh = render_all(owner, spec, now=now, available=available)
    # Only what this OcrService controls is read as its own: a same-named Deployment or
    # revisions ConfigMap of someone else never feeds the rollout or a rollback.
    mine = {k: v if v is not None and plan.controlled_by(v, uid) else None for k, v in snap.children.items()}

    observed = rollout.summarize(mine.get("Deployment"), snap.pods)
    prior = rollout.RolloutStatus.from_status(owner.get("status"))
    history = revisions.parse_history(mine.get("RevisionHistory"),
                                      limit=spec.rollout.revision_history_limit, last_good=prior.last_good_revision)
    if history.rejected:
        log.warning("%s/%s: revision history entries %s do not match their hash: dropped", ns, name,
                    ", ".join(history.rejected))
    gate = spec.rollout.quality_gate
    target = _target(spec)
    pages = await _golden_pages(kube, ns, gate, target, fresh.revision, prior, observed)
    records = quality.parse_records(mine.get("QualityRecords"))
    prior_gate = (owner.get("status") or {}).get("qualityGate")
    finished = gates.result((ns, name)) if gates is not None else None
    concluded = quality.conclude(finished, gate=gate, pages=pages, records=records, prior_record=prior_gate,
                               current_revision=prior.current_revision, last_good=prior.last_good_revision,
                               attempt=prior.rollout_started, progressing=prior.phase == rollout.PROGRESSING)
    rules = policy(spec, quality.budget_seconds(gate, pages))
    held = isinstance(pages, quality.PagesProblem) and fresh.revision not in (
        prior.current_revision, prior.last_good_revision, prior.failed_revision)
    if held:
        decision = rollout.hold(fresh.revision, prior, observed, rules, now, pages.reason, pages.message)
    else:
        failure = rollout.Failure(*concluded.failure, pod=finished.job.pod) if concluded.failure and finished else None
        decision = rollout.decide(fresh.revision, prior, observed, rules, now, gate_failure=failure)
    rs = decision.status
    step = quality.next_step(gate=gate, pages=pages, outcome=concluded, pods=observed.pods, phase=rs.phase,
                             current_revision=rs.current_revision, last_good=rs.last_good_revision,
                             attempt=rs.rollout_started, progressing=rs.phase == rollout.PROGRESSING)

    history = history.record(fresh.revision, fresh.pod_template)
    try:
        history = history.mark_good(decision.status.last_good_revision)
    except KeyError:
        log.warning("%s/%s: last good revision %s has no stored template", ns, name,
                    decision.status.last_good_revision)
    template = revisions.target_template(decision.target_revision, fresh.revision, fresh.pod_template, history)
    if template is None:
        target = decision.target_revision
        template, decision = _untrusted_target(decision, fresh, history, mine.get("Deployment"), observed)
        log.warning("%s/%s: revision %s has no trusted stored template: %s", ns, name, target,
                    "rollback refused" if decision.target_revision != target else "the Deployment keeps its own")
    # The usual case, the desired revision's own template: what was rendered above (rendering
    # is a good part of a reconcile's CPU).
    desired = fresh if template == fresh.pod_template else render_all(owner, spec, now=now, pod_template=template,
                                                                       available=available)

    objects: dict[str, dict[str, Any] | None] = dict(desired.objects)
    if held and prior.current_revision is None:
        del objects["Deployment"]  # the first revision waits for usable golden pages: no rollout at all
    objects["RevisionHistory"] = revisions.render_history(owner, history)
    objects["QualityRecords"] = _render_records(owner, step.records) if gate is not None else None
    actions = plan.plan(objects, snap.children, uid, children.child_names(name))
    actions = await _confirm_creates(kube, actions, objects, snap, uid, ns, store)
    result.actions = [str(a) for a in actions if a.verb != plan.SKIP]
    outcome = await execute(kube, actions, namespace=ns)
    result.writes += outcome.writes
    if store is not None:
        for action in actions:
            if action.writes and action.kind in outcome.written:
                store.wrote(children.BY_KEY[action.kind].kind, ns, action.name, outcome.live.get(action.kind))

    new, changed = status.build(
        owner, spec, now=now, desired_revision=fresh.revision,
        deployment=outcome.live.get("Deployment"), hpa=outcome.live.get("HorizontalPodAutoscaler"),
        decision=decision, apply_errors=outcome.errors, conflicts=outcome.conflicts,
        active_schedule=desired.active_schedule, scaled_to_zero_by=desired.scaled_to_zero_by,
        gate_record=step.record, gate_condition=step.condition,
    )
    events = [(e.type, e.reason, e.message) for e in decision.events]
    verdict = concluded.verdict
    if verdict is not None and verdict.passed and concluded.failure is None:
        events.append(("Normal", "QualityGatePassed", f"revision {finished.job.revision}: {verdict.message}"))
    # Told each time a reconcile finds it (the recorder aggregates repeats): the user must act.
    events += [("Warning", status.CHILD_CONFLICT, conflict) for conflict in outcome.conflicts]
    rolling_out = rollout.PROGRESSING in (prior.phase, decision.status.phase)
    await _write_status(kube, owner, new, changed, events, result, hold=0.0 if finished else status_hold,
                        rollout_tells=rolling_out)
    if gates is not None and finished is not None:
        gates.forget((ns, name), finished)  # what it decided is written: never concluded twice
    await _admit(kube, ns, step.admit, now)
    result.writes += len(step.admit)
    if gates is not None:
        gates.ensure((ns, name), step.job, pages if isinstance(pages, quality.GoldenPages) else None, target)

    waits = [RESYNC_SECONDS]
    if result.status_held:
        waits.append(status_hold)
    if decision.requeue_after is not None:
        waits.append(decision.requeue_after)
    if spec.autoscaling is not None and spec.autoscaling.schedules:
        waits.append(_next_minute(now))
    result.requeue_after = min(waits)
    return result
