"""One level-based, idempotent reconcile of one OcrService.

snapshot -> parse spec -> render -> rollout.decide (the revisions and the quality gate) -> plan ->
the runtime's apply -> status (+ events). Called for every reason alike (create, update, restart,
a child changed, a deadline, a gate job done); a call that finds everything in shape makes no
write at all. With spec.rollout.qualityGate the golden pages are read while a rollout needs them,
and after the status is written the pods of passed revisions are admitted (their readiness-gate
condition set) and the next gate job handed to the runtime's background jobs (gaterun.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import replace
from typing import Any, Mapping

from ocr_operator.labels import APPLIED_HASH_KEY
from ocr_operator.runtime import conditions as C
from ocr_operator.runtime import plan
from ocr_operator.runtime.controller import Context, Result, Runtime
from ocr_operator.spec import KIND, OcrServiceSpec, SpecError, parse

from . import children, fetchprogress, gatekey, gaterun, naming, revisions, rollout, snapshot, status
from .render import Desired, configmap, modelfetch, render_all
from .rollout.gate import GateInputs
from .rollout.machine import refuse_rollback
from .rollout.pages import GoldenPages
from .rollout.verdict import parse_records, render_records

log = logging.getLogger(__name__)

# Full reconcile of every object this often even when nothing wakes it (a safety net for a
# missed watch event); deadlines and child events wake it much earlier.
RESYNC_SECONDS = float(os.environ.get("OCR_OPERATOR_RESYNC_SECONDS", "300"))


def policy(spec: OcrServiceSpec) -> rollout.Policy:
    r = spec.rollout
    return rollout.Policy(
        failure_threshold=r.health_check.failure_threshold,
        period_seconds=r.health_check.period_seconds,
        model_load_timeout_seconds=r.model_load_timeout_seconds,
        progress_deadline_seconds=r.progress_deadline_seconds,
        auto_rollback=r.auto_rollback,
        settle_seconds=r.settle_seconds,
        max_restarts=r.max_restarts,
        unschedulable_grace_seconds=r.unschedulable_grace_seconds,
        fetch_seconds=modelfetch.fetch_seconds(spec),
    )


def _next_minute(now: dt.datetime) -> float:
    return 60.0 - now.second - now.microsecond / 1e6 + 0.5


async def _write_status(rt: Runtime, owner: Mapping[str, Any], new: dict[str, Any], changed, events, result: Result,
                        hold: float = 0.0, rollout_tells: bool = False) -> None:
    """Patch the status if it changed; the events go to the result (posted off this path).
    With `hold` > 0 a patch of counts and messages only (status.urgent) is not written now:
    the result asks to be woken in `hold` seconds, when it is written unless a later
    reconcile wrote it first. Its transitions' events wait with it (the reconcile that writes
    them finds them again)."""
    md = owner["metadata"]
    patch = C.diff(owner.get("status"), new)
    if patch is not None and hold > 0 and not status.urgent(owner.get("status"), patch):
        result.status_held = True
        # A first report waits whole: the reconcile that writes it decides its rollout's start
        # again, RolloutStarted included (status.first_report).
        result.events = [] if status.first_report(owner.get("status"), patch) else list(events)
        return
    if patch is not None:
        result.status = await rt.kube.merge_patch(KIND, md["namespace"], md["name"], {"status": patch},
                                                  subresource="status")
        result.writes += 1
    result.events = [*events, *status.transition_events(changed, rollout_tells=rollout_tells)]


def _untrusted_target(decision: rollout.Decision, fresh: Desired, history: revisions.History,
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
    return fresh.pod_template, refuse_rollback(decision, fresh.revision, untrusted_why(target, history), observed)


def untrusted_why(target: str, history: revisions.History) -> str:
    """Why the stored template of `target` is not applied, for the RollbackRefused event and the
    Degraded condition: each case names what the user can check."""
    if target in history.rejected:
        return "its stored pod template does not match its revision hash (the revision history was edited)"
    if target in history.mismatched:
        return ("its stored pod template's sha256 is not the digest the status records for it (the revision "
                "history was edited: a template forged to match the short revision)")
    if target in history.revisions():
        return ("the status records no full digest of its pod template (written by an older operator), so its "
                "stored template cannot be checked")
    return "its pod template is not in the revision history"


async def _invalid(rt: Runtime, owner: Mapping[str, Any], error: str, ctx: Context) -> Result:
    """A spec that cannot be rendered: the status says why; nothing is applied or retried."""
    md = owner["metadata"]
    result = Result(requeue_after=None)
    snap = await snapshot.read(rt, md["namespace"], md["name"])
    new, changed = status.build(owner, status.InvalidSpec(error, snap.deployment), now=ctx.now)
    await _write_status(rt, owner, new, changed, [], result)
    return result


async def reconcile(rt: Runtime, owner: Mapping[str, Any], ctx: Context) -> Result:
    """`ctx.available`: the optional child kinds the API serves (children.optional_kinds);
    `ctx.status_hold`: how long a status patch of counts and messages only may wait (0: written
    now); `ctx.jobs`: the background jobs the gate runs on (None: gate jobs are neither run nor
    concluded, pods of the last good revision are still admitted)."""
    md = owner["metadata"]
    ns, name, uid = md["namespace"], md["name"], md["uid"]
    key, now, available = (ns, name), ctx.now, ctx.available
    if md.get("deletionTimestamp"):
        return Result(requeue_after=None)  # garbage collection removes the children
    try:
        spec = parse(owner.get("spec") or {})
    except SpecError as exc:
        return await _invalid(rt, owner, str(exc), ctx)

    result = Result()
    snap = await snapshot.read(rt, ns, name, available=available)
    fresh = render_all(owner, spec, now=now, available=available)
    # Only what this OcrService controls is read as its own: a same-named Deployment or
    # revisions ConfigMap of someone else never feeds the rollout or a rollback.
    mine = {k: v if v is not None and plan.controlled_by(v, uid) else None for k, v in snap.children.items()}

    # Only pods of its own Deployment's ReplicaSets, by uid: a pod that carries the labels alone
    # (anyone may create one) never fakes Ready, a crash or an OOM kill (rollout/owners.py).
    pods = rollout.controlled_pods(snap.pods, snap.replicasets, mine.get("Deployment"), uid)
    observed = rollout.summarize(mine.get("Deployment"), pods)
    prior = rollout.RolloutStatus.from_status(owner.get("status"))
    # The full digests the status records (the operator's own writes), and the desired one: a
    # stored template is applied only when it hashes to one of these (revisions.target_template).
    known = prior.digests()
    history = revisions.parse_history(mine.get("RevisionHistory"), limit=spec.rollout.revision_history_limit,
                                      last_good=prior.last_good_revision, digests=known)
    known[fresh.revision] = naming.template_digest(fresh.pod_template)
    if history.rejected or history.mismatched:
        log.warning("%s/%s: revision history entries %s do not match their hash or recorded digest: dropped", ns,
                    name, ", ".join(history.rejected + history.mismatched))
    gate_spec = spec.rollout.quality_gate
    # spec.auth with a gate: the gate's own key, written into its Secret before any pod mounts it.
    gate_key = gatekey.current(owner, now.timestamp()) if configmap.gate_key(spec) else None
    # A Secret of that name that is not ours: a child conflict like any other (Degraded, an Event).
    key_conflicts: tuple[str, ...] = ()
    if gate_key is not None and (refused := await gatekey.write(rt.kube, owner, gate_key, now.timestamp())) is not None:
        log.warning("%s/%s: %s", ns, name, refused)
        key_conflicts = (refused,)
    send_key = gate_key.send if gate_key is not None else None
    pages = await gaterun.golden_pages(rt.kube, ns, spec, fresh.revision, prior, observed, send_key)
    finished = ctx.jobs.result(key) if ctx.jobs is not None else None
    gate = GateInputs(gate_spec, pages, parse_records(mine.get("QualityRecords")),
                      (owner.get("status") or {}).get("qualityGate"), finished)
    outcome = rollout.decide(rollout.Inputs(fresh.revision, prior, observed, policy(spec), now, gate))
    decision, step = outcome.decision, outcome.gate

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
        outcome = replace(outcome, decision=decision)
        log.warning("%s/%s: revision %s has no trusted stored template: %s", ns, name, target,
                    "rollback refused" if decision.target_revision != target else "the Deployment keeps its own")
    decision = replace(decision, status=decision.status.with_digests(known))
    outcome = replace(outcome, decision=decision)
    # The usual case, the desired revision's own template: what was rendered above (rendering
    # is a good part of a reconcile's CPU).
    desired = fresh if template == fresh.pod_template else render_all(owner, spec, now=now, pod_template=template,
                                                                       available=available)

    objects: dict[str, dict[str, Any] | None] = dict(desired.objects)
    if outcome.held and prior.current_revision is None:
        del objects["Deployment"]  # the first revision waits for usable golden pages: no rollout at all
    objects["RevisionHistory"] = revisions.render_history(owner, history)
    objects["QualityRecords"] = render_records(owner, step.records) if gate_spec is not None else None
    me = plan.Owner(KIND, name, uid)
    names = children.child_names(name)
    actions = plan.plan(objects, snap.children, me, names, APPLIED_HASH_KEY)
    result.actions = [str(a) for a in actions if a.verb != plan.SKIP]
    applied = await rt.applier.execute(
        actions, namespace=ns,
        replan=lambda a, found: plan.plan_one(a.key, objects[a.key], found, me, a.name, APPLIED_HASH_KEY))
    result.writes += applied.writes

    # spec.model.source.s3: the ModelFetching condition, from the fetching pod's last log line.
    fetch = (await fetchprogress.read(rt.kube, ns, fresh.revision, observed, decision)
             if modelfetch.s3_source(spec) is not None else None)
    new, changed = status.build(owner, status.Report(
        spec, fresh.revision, decision, deployment=applied.live.get("Deployment"),
        hpa=applied.live.get("HorizontalPodAutoscaler"), apply_errors=tuple(applied.errors),
        conflicts=(*applied.conflicts, *key_conflicts), active_schedule=desired.active_schedule,
        scaled_to_zero_by=desired.scaled_to_zero_by, gate_record=step.record, gate_condition=step.condition,
        fetch=fetch),
        now=now)
    events = [(e.type, e.reason, e.message) for e in outcome.events]
    # Told each time a reconcile finds it (the recorder aggregates repeats): the user must act.
    events += [("Warning", status.CHILD_CONFLICT, conflict) for conflict in (*applied.conflicts, *key_conflicts)]
    rolling_out = rollout.PROGRESSING in (prior.phase, decision.status.phase)
    await _write_status(rt, owner, new, changed, events, result, hold=0.0 if finished else ctx.status_hold,
                        rollout_tells=rolling_out)
    if ctx.jobs is not None and finished is not None:
        ctx.jobs.forget(key, finished)  # what it decided is written: never concluded twice
    await gaterun.admit(rt.kube, ns, step.admit, now)
    result.writes += len(step.admit)
    if ctx.jobs is not None:
        gaterun.ensure(ctx.jobs, key, step.job, pages if isinstance(pages, GoldenPages) else None,
                       gaterun.Target.of(spec, send_key))

    waits = [RESYNC_SECONDS]
    if result.status_held:
        waits.append(ctx.status_hold)
    if decision.requeue_after is not None:
        waits.append(decision.requeue_after)
    if fetch is not None and fetch.pod is not None:
        waits.append(fetchprogress.PROGRESS_REQUEUE_SECONDS)
    if spec.autoscaling is not None and spec.autoscaling.schedules:
        waits.append(_next_minute(now))
    result.requeue_after = min(waits)
    return result
