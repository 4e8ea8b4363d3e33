"""The OcrBatch controller: the reconcile of one batch, on the runtime's controller core.

The runtime queues a batch's key on news of the batch, of its Job or of its workers' pods (the
``ocr.causalflow.dev/batch`` label names the batch), retries a failed reconcile with backoff,
wakes it when it asks, posts its Events and runs its completion callback as a background job;
the OcrService, its Service and the pods come from the runtime's cache. The label only wakes the
batch: its Job is the Job of its name that it controls, its workers the pods that Job controls
(decide.batch_job, decide.job_pods), so a decoy carrying the name or the label is never read as
the batch's. A reconcile decides with
decide.py and writes at most: the workers' ConfigMap and Job (once, through the runtime's apply,
after the preflight found everything the batch needs), a Job deletion (cancel), and one status
merge patch when the status changed. Progress is coalesced: a running worker's log is read at
most once per PROGRESS_SECONDS (its last `{"progress": ...}` line), a finished one's termination
message from the pod cache, so the status is written at most once per interval plus once per
transition, never per page. So are the Job's Events, and only while it lacks pods: a pod the API
server refuses is only an Event there, which the status quotes (waiting.py). The callback's
outcome is written to status.callback by the reconcile that finds it, so it is sent once.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import time
from typing import Any, Mapping

from ocr_batch_worker.contract import EXIT_DONE, EXIT_TERMINATED
from ocr_limits.timestamps import iso
from ocr_batch_worker.progress import Summary, summarize
from ocr_operator.api.ocrbatch import parse as parse_spec
from ocr_operator.labels import APPLIED_HASH_KEY
from ocr_operator.runtime import conditions as C
from ocr_operator.runtime import plan
from ocr_operator.runtime.controller import Context, Controller, Key, Result, Runtime
from ocr_operator.runtime.jobs import Jobs
from ocr_operator.runtime.kube import ApiError

from . import callback, decide, render, stall, storagewait, waiting
from .kinds import OCRBATCH
from .preflight import preflight

log = logging.getLogger(__name__)

PROGRESS_SECONDS = float(os.environ.get("OCR_OPERATOR_BATCH_PROGRESS_SECONDS", "10"))
# How soon a batch held back by its preflight looks again (the OcrService, a PVC or a Secret may appear).
PREFLIGHT_RETRY_SECONDS = float(os.environ.get("OCR_OPERATOR_BATCH_PREFLIGHT_SECONDS", "15"))
LOG_TAIL_LINES, LOG_LIMIT_BYTES = 50, 64 * 1024
READY = "Ready"


def worker_settings(env: Mapping[str, str] = os.environ) -> render.WorkerSettings:
    """The workers' image: OCR_OPERATOR_BATCH_IMAGE (the chart sets the operator's own image)."""
    return render.WorkerSettings(
        image=env.get("OCR_OPERATOR_BATCH_IMAGE", ""),
        image_pull_policy=env.get("OCR_OPERATOR_BATCH_IMAGE_PULL_POLICY", "IfNotPresent"),
        progress_interval=min(PROGRESS_SECONDS, 10.0))


def _conditions(batch: Mapping[str, Any], st: Mapping[str, Any], new: list[C.Condition],
                now: dt.datetime) -> list[dict[str, Any]]:
    """The status's conditions with `new` merged in; a condition the write does not name is kept as
    it is (the status is written whole: Complete must outlive the callback's record, and Stalled
    every later progress write)."""
    merged, _ = C.merge(st.get("conditions"), new, generation=batch["metadata"].get("generation") or 0,
                        now=iso(now), order=(READY,))
    named = {c.type for c in new}
    return merged + [dict(c) for c in st.get("conditions") or () if c.get("type") not in named]


class OcrBatches:
    """The domain's part of the OcrBatch controller (runtime.controller.Reconciler). `services`:
    the OcrService controller, whose cache holds the OcrServices a batch sends to."""

    kind = OCRBATCH

    def __init__(self, runtime: Runtime, services: Controller | None = None, *,
                 settings: render.WorkerSettings | None = None, progress_seconds: float = PROGRESS_SECONDS) -> None:
        self.runtime = runtime
        self.services = services
        self.settings = settings or worker_settings()
        self.progress_seconds = progress_seconds
        self.reports: dict[Key, dict[int, dict[str, Any]]] = {}  # last progress report per index
        self.progress_read: dict[Key, float] = {}
        self.watches: dict[Key, dict[int, stall.Watch]] = {}  # each running index's stall clock
        self.restarted: dict[Key, dict[int, stall.Restart]] = {}  # indices restarted for a stall
        self.refused: dict[Key, str | None] = {}  # the Job's current refusal to create pods (waiting.py)
        self.waiting_said: dict[Key, str] = {}  # the reason of the last waiting event posted
        self.clock = time.monotonic  # the stall clocks' time

    # ------------------------------------------------------------------ the runtime's questions
    def owner_of(self, obj: Mapping[str, Any]) -> Key | None:
        md = obj.get("metadata") or {}
        batch = (md.get("labels") or {}).get(render.LABEL_BATCH)
        return (md.get("namespace") or "", batch) if batch else None

    def forgotten(self, key: Key, last: Mapping[str, Any], jobs: Jobs) -> None:
        """The batch is gone: the Job and its pods go with it (owner reference): deleting cancels,
        and the callback says so (best effort: a deletion while the operator is down sends nothing)."""
        ns, name = key
        for memo in (self.reports, self.progress_read, self.watches, self.restarted, self.refused,
                     self.waiting_said):
            memo.pop(key, None)
        self.runtime.store.forget(ns, [("Job", render.job_name(name)), ("ConfigMap", render.configmap_name(name))],
                                  (render.LABEL_BATCH, name))
        due = decide.callback_on_delete(last)
        if due is not None:
            event, status = due
            jobs.spawn(self._deliver_deleted(key, {**last, "status": status}, event),
                       name=f"ocr-batch-callback-deleted-{name}")

    # ------------------------------------------------------------------ the reconcile
    async def reconcile(self, batch: Mapping[str, Any], ctx: Context) -> Result:
        md = batch["metadata"]
        key = (md["namespace"], md["name"])
        ns, name = key
        st = dict(batch.get("status") or {})
        now = ctx.now
        result = Result()
        phase = st.get("phase")
        if phase in decide.TERMINAL:
            return await self._ended(key, batch, st, phase, ctx, result)
        found = await self._job(ns, name)
        job = decide.batch_job(found, batch)  # a Job of that name the batch does not control is not its
        if decide.cancel_requested(batch):
            if job is not None and not (job.get("metadata") or {}).get("deletionTimestamp"):
                await self.runtime.kube.delete("Job", ns, render.job_name(name), uid=job["metadata"].get("uid"))
                self.runtime.store.wrote("Job", ns, render.job_name(name), None)
                result.writes += 1
            summary = self._summary(key, batch, self._workers(key, job)) if job is not None else None
            return await self._end(key, batch, st, decide.Phase(decide.CANCELLED, "Cancelled",
                                                                "spec.cancel: the workers were stopped; the results "
                                                                "written so far are kept"), summary, ctx, result)
        if found is not None and job is None:
            return await self._hold(key, batch, st, decide.job_conflict(render.job_name(name)), now, result)
        if job is None:
            if st.get("jobName"):
                return await self._end(key, batch, st, decide.Phase(decide.FAILED, "JobDeleted",
                                                                    f"Job {st['jobName']} was deleted"), None, ctx,
                                       result)
            return await self._start(key, batch, st, ctx, result)
        suspended = parse_spec(batch["spec"]).suspend
        if (want := decide.suspend_change(suspended, job)) is not None:
            job = await self._suspend(key, job, want, result)
        workers = self._workers(key, job)  # one view of the pods for the whole reconcile
        if key not in self.progress_read or time.monotonic() - self.progress_read[key] >= self.progress_seconds:
            await self._read_logs(key, workers)
            if not suspended:  # no pod is wanted: none is missing
                await self._read_refusal(key, job)
        summary = self._summary(key, batch, workers)
        missing = None if suspended else waiting.waiting(self.refused.get(key), workers.values())
        ph = decide.phase_of(job, summary, missing, suspended=suspended)
        if ph.phase in decide.TERMINAL:
            return await self._end(key, batch, st, ph, summary, ctx, result)
        self._say_waiting(key, missing, result)
        new = {**st, "phase": ph.phase, **decide.progress_status(summary, moving=not suspended)}
        # Suspended, the workers stopping are not stalled (the Stalled condition stays as it was).
        stalls = [] if suspended else await self._stalls(key, batch, st, workers, result)
        stalls = [*stalls, *self._storage(key, batch, st, result)]  # StorageAvailable (storagewait.py)
        ready = C.Condition(READY, C.TRUE if ph.ready else C.FALSE, ph.reason, ph.message)
        new["conditions"] = _conditions(batch, st, [ready, *stalls], now)
        await self._write(key, batch, st, new, result)
        result.requeue_after = self.progress_seconds
        return result

    # ------------------------------------------------------------------ steps
    async def _job(self, ns: str, name: str) -> dict[str, Any] | None:
        """Whatever holds the Job name (decide.batch_job tells whether it is the batch's)."""
        return await self.runtime.read("Job", ns, render.job_name(name))

    async def _suspend(self, key: Key, job: Mapping[str, Any], suspend: bool, result: Result) -> dict[str, Any]:
        """Set the Job's spec.suspend to the batch's: the Job controller then deletes the workers'
        pods (SIGTERM: each releases its documents and writes its progress; no index's retry is
        used), or makes them again, and each skips the documents already finished."""
        ns, name = key
        job_name = render.job_name(name)
        patch = {"metadata": {"uid": job["metadata"]["uid"]}, "spec": {"suspend": suspend}}  # uid: this Job only
        patched = await self.runtime.kube.merge_patch("Job", ns, job_name, patch)
        self.runtime.store.wrote("Job", ns, job_name, patched)
        result.writes += 1
        said = ("spec.suspend: the workers stop; the results written so far are kept" if suspend else
                "spec.suspend false: the workers run again and skip every finished document")
        log.info("OcrBatch %s/%s: %s", ns, name, said)
        result.events.append(("Normal", "Suspended" if suspend else "Resumed", said))
        return patched

    def _workers(self, key: Key, job: Mapping[str, Any]) -> dict[int, Mapping[str, Any]]:
        """The batch's workers, the latest pod of each index: pods with the batch's label (the
        cache's grouping) that the batch's own Job controls (decide.job_pods), never a pod by its
        label alone."""
        pods = decide.job_pods(self.runtime.store.pods_of(key[0], render.LABEL_BATCH, key[1]), job)
        return decide.latest_per_index(pods)

    async def _start(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], ctx: Context,
                     result: Result) -> Result:
        ns, name = key
        missing, found = await preflight(self.runtime, self.services, batch)
        if missing is not None:
            return await self._hold(key, batch, st, missing, ctx.now, result)
        if not self.settings.image:
            raise RuntimeError("OCR_OPERATOR_BATCH_IMAGE is not set: the operator does not know the workers' image")
        assert found.service is not None and found.service_endpoint is not None
        tls_secret = decide.service_tls(found.service)
        tls = None if tls_secret is None else render.Tls(
            tls_secret, decide.trust_key(found.secrets.get(tls_secret) or {}),
            decide.server_name(batch["spec"]["service"], ns))
        url = decide.service_url(found.service_endpoint, https=tls is not None)
        auth = decide.service_auth(found.service)
        objects = {
            "ConfigMap": render.render_configmap(batch, url, self.settings, api_key=auth is not None, tls=tls),
            "Job": render.render_job(batch, self.settings, placement=found.service.get("spec") or {}, api_key=auth,
                                     tls=tls),
        }
        taken = await self._apply(key, batch, objects, result)
        if taken is not None:
            return await self._hold(key, batch, st, taken, ctx.now, result)
        log.info("OcrBatch %s/%s: Job %s created (%s worker(s) -> %s)", ns, name, render.job_name(name),
                 parse_spec(batch["spec"]).parallelism, url)
        new = {**st, "phase": decide.PENDING, "jobName": render.job_name(name), "startTime": iso(ctx.now)}
        new["conditions"] = _conditions(batch, st, [C.Condition(READY, C.TRUE, "JobCreated",
                                                                f"Job {render.job_name(name)} sends the pages "
                                                                f"to {url}")], ctx.now)
        await self._write(key, batch, st, new, result)
        result.events.append(("Normal", "Started", f"Job {render.job_name(name)}: "
                              f"{parse_spec(batch['spec']).parallelism} worker(s) for OcrService "
                              f"{batch['spec']['service']}"))
        result.requeue_after = self.progress_seconds
        return result

    async def _apply(self, key: Key, batch: Mapping[str, Any], objects: dict[str, dict[str, Any]],
                     result: Result) -> decide.Missing | None:
        """The workers' ConfigMap and Job through the runtime's apply (the Job created once, by a
        create that fails on a taken name); what holds the batch back when a name is someone else's.
        Each name is looked up first (the cache, or one GET where the namespace could not be
        listed), so someone else's ConfigMap is never force-applied over; and while any name is
        someone else's the Job is not created: its workers would mount that ConfigMap."""
        ns, name = key
        me = plan.Owner(OCRBATCH.kind, name, batch["metadata"]["uid"])
        names = {"ConfigMap": render.configmap_name(name), "Job": render.job_name(name)}

        def one(child: str, observed: dict[str, Any] | None) -> plan.Action:
            return plan.plan_one(child, objects[child], observed, me, names[child], APPLIED_HASH_KEY,
                                 create_only=child == "Job")

        actions = [one(child, await self.runtime.read(child, ns, names[child])) for child in objects]
        if any(a.verb == plan.CONFLICT for a in actions):
            actions = [a for a in actions if a.key != "Job" or a.verb == plan.CONFLICT]
        applied = await self.runtime.applier.execute(actions, namespace=ns, replan=lambda a, found: one(a.key, found))
        result.writes += applied.writes
        result.actions += [str(a) for a in actions if a.verb != plan.SKIP]
        if applied.errors:
            raise RuntimeError("; ".join(applied.errors))
        taken = sorted(applied.conflicted)
        return decide.conflict(taken[0], names[taken[0]]) if taken else None

    async def _hold(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], missing: decide.Missing,
                    now: dt.datetime, result: Result) -> Result:
        """Pending, the Ready condition naming what is missing; look again after PREFLIGHT_RETRY_SECONDS."""
        new = {**st, "phase": decide.PENDING}
        new["conditions"] = _conditions(batch, st, [C.Condition(READY, C.FALSE, missing.reason, missing.message)],
                                        now)
        if (st.get("conditions") or [{}])[0].get("reason") != missing.reason:
            log.info("OcrBatch %s/%s held back: %s", *key, missing.message)
        await self._write(key, batch, st, new, result)
        result.requeue_after = PREFLIGHT_RETRY_SECONDS
        return result

    async def _read_logs(self, key: Key, workers: Mapping[int, Mapping[str, Any]]) -> None:
        """The last progress line of each running worker (one log read per worker per interval),
        and what it says of the worker's progress to the index's stall clock (stall.py)."""
        self.progress_read[key] = time.monotonic()
        ns = key[0]
        watches = self.watches.setdefault(key, {})
        for index, pod in workers.items():
            md = pod["metadata"]
            if not decide.running(pod):
                watches.pop(index, None)
                continue
            mark = None
            try:
                text = await self.runtime.kube.read_log(ns, md["name"], tail_lines=LOG_TAIL_LINES,
                                                        limit_bytes=LOG_LIMIT_BYTES)
            except ApiError as exc:  # e.g. its node unreachable: no news, the stall clock runs on
                log.debug("no log of %s/%s: %s", ns, md["name"], exc)
            else:
                report = decide.report_from_log(text)
                if report is not None:
                    self.reports.setdefault(key, {})[index] = report
                mark = stall.progress_mark(report, text)
            if md.get("deletionTimestamp"):
                watches.pop(index, None)  # going: its stall clock stops (_stalls follows its deletion)
            else:
                watches[index] = stall.observe(watches.get(index), md.get("uid") or md["name"], md["name"], mark,
                                               self.clock())

    async def _read_refusal(self, key: Key, job: Mapping[str, Any]) -> None:
        """While the Job has fewer pods than it should, its Events: whether the API server refuses to
        create them (waiting.refusal). An Event list that fails (e.g. a Role without it) is no news."""
        uid = (job.get("metadata") or {}).get("uid")
        if not uid or not waiting.short_of_workers(job):
            self.refused.pop(key, None)
            return
        try:
            events = await self.runtime.kube.list("Event", key[0], field_selector=f"involvedObject.uid={uid}")
        except ApiError as exc:
            log.debug("no Events of Job %s/%s: %s", key[0], render.job_name(key[1]), exc)
            return
        self.refused[key] = waiting.refusal(events)

    def _say_waiting(self, key: Key, missing: waiting.Waiting | None, result: Result) -> None:
        """A Warning event when the workers start to wait for something else (or again)."""
        if missing is not None and self.waiting_said.get(key) != missing.reason:
            log.warning("OcrBatch %s/%s: %s", *key, missing.message)
            result.events.append(("Warning", missing.reason, missing.message))
        if missing is None:
            self.waiting_said.pop(key, None)
        else:
            self.waiting_said[key] = missing.reason

    async def _stalls(self, key: Key, batch: Mapping[str, Any], st: Mapping[str, Any],
                      pods: Mapping[int, Mapping[str, Any]], result: Result) -> list[C.Condition]:
        """Restart each index whose pod has made no progress for spec.stallSeconds (stall.py): its pod
        is deleted (the Job runs the index again), with a Warning event. A pod so deleted that is
        still there stallSeconds later (a lost node) is marked Failed, so that the Job replaces it.
        The Stalled condition: True from a restart until every restarted index moved again."""
        ns = key[0]
        limit = float(parse_spec(batch["spec"]).stall_seconds)
        now = self.clock()
        watches, restarted = self.watches.setdefault(key, {}), self.restarted.setdefault(key, {})
        said = []
        for index, pod in pods.items():
            md = pod["metadata"]
            uid = md.get("uid") or md["name"]
            if md.get("deletionTimestamp"):
                if stall.lost(restarted.get(index), uid, now, limit) and decide.terminated(pod) is None:
                    await self.runtime.kube.merge_patch("Pod", ns, md["name"], stall.failed_status(), subresource="status")
                    result.writes += 1
                    restarted[index] = stall.Restart(uid, now)  # marked once per stallSeconds at most
                continue
            watch = watches.get(index)
            if watch is None or watch.pod != uid or not stall.stalled(watch, now, limit):
                continue
            said.append(stall.message(index, watch, now, limit))
            log.warning("OcrBatch %s/%s: %s", *key, said[-1])
            await self.runtime.kube.delete("Pod", ns, md["name"], uid=md.get("uid"))
            result.writes += 1
            result.events.append(("Warning", stall.STALLED, said[-1]))
            restarted[index], watches[index] = stall.Restart(uid, now), stall.Watch(uid, md["name"], None, now)
        if said:
            return [C.Condition(stall.CONDITION, C.TRUE, stall.STALLED, "; ".join(said))]
        finished = {i for i, p in pods.items() if (decide.terminated(p) or {}).get("exitCode") == EXIT_DONE}
        if restarted and stall.recovered(restarted, watches, finished):
            indices = ", ".join(str(i) for i in sorted(restarted))
            restarted.clear()
            return [C.Condition(stall.CONDITION, C.FALSE, stall.RECOVERED,
                                f"the index(es) restarted for a stall ({indices}) made progress again")]
        return []

    def _storage(self, key: Key, batch: Mapping[str, Any], st: Mapping[str, Any], result: Result) -> list[C.Condition]:
        """The StorageAvailable condition from the indices' last reports (storagewait.py), with a
        Warning event when it turns False: the workers are waiting out a storage outage."""
        said = storagewait.verdict(self.reports.get(key, {}), C.get(st.get("conditions"), storagewait.CONDITION),
                                   parse_spec(batch["spec"]).limits.storage_retry_seconds)
        if said is None:
            return []
        if said.event is not None:
            log.warning("OcrBatch %s/%s: %s", *key, said.event)
            result.events.append(("Warning", storagewait.UNAVAILABLE, said.event))
        return [C.Condition(storagewait.CONDITION, said.status, said.reason, said.message)]

    def _summary(self, key: Key, batch: Mapping[str, Any], workers: Mapping[int, Mapping[str, Any]]) -> Summary:
        """The batch's progress from its finished workers' termination messages and the reports read."""
        reports = self.reports.setdefault(key, {})
        for index, pod in workers.items():
            done = decide.terminated(pod)
            report = decide.report_from_message((done or {}).get("message"))
            if report is not None:
                reports[index] = report
            elif (done and done.get("exitCode") not in (EXIT_DONE, EXIT_TERMINATED) and index in reports
                  and done.get("message")):
                reports[index] = {**reports[index], "fatal": done["message"][:1000]}
        return summarize(list(reports.values()), parse_spec(batch["spec"]).parallelism)

    async def _end(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], ph: decide.Phase,
                   summary: Summary | None, ctx: Context, result: Result) -> Result:
        new = {**st, "phase": ph.phase, "completionTime": iso(ctx.now)}
        if summary is not None:
            new.update(decide.progress_status(summary, moving=False))
        conds = [C.Condition(READY, C.FALSE, ph.reason, ph.message),
                 C.Condition(decide.END_CONDITION[ph.phase], C.TRUE, ph.reason, ph.message),
                 *self._storage(key, batch, st, result)]
        new["conditions"] = _conditions(batch, st, conds, ctx.now)
        await self._write(key, batch, st, new, result)
        log.info("OcrBatch %s/%s %s: %s", *key, ph.phase, ph.message)
        result.events.append(("Normal" if ph.phase == decide.SUCCEEDED else "Warning", ph.phase, ph.message))
        self._callback(key, {**batch, "status": new}, ph.phase, ctx)
        return await self._expire(key, {**batch, "status": new}, ctx, result)  # its own status writes wake no reconcile

    async def _write(self, key: Key, batch: Mapping[str, Any], st: Mapping[str, Any], new: dict[str, Any],
                     result: Result) -> None:
        new = {**new, "observedGeneration": batch["metadata"].get("generation")}
        if new == st:
            return
        ns, name = key
        result.status = await self.runtime.kube.merge_patch(OCRBATCH.kind, ns, name, {"status": new},
                                                            subresource="status")
        result.writes += 1

    # ------------------------------------------------------------------ callback
    async def _ended(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], phase: str, ctx: Context,
                     result: Result) -> Result:
        """An ended batch: record a finished callback in status.callback, or send the one due."""
        jobs = ctx.jobs
        done = jobs.result(key) if jobs is not None else None
        if done is not None:
            event, outcome = done
            record, told = callback.recorded(batch, event, outcome, iso(ctx.now))
            log.info("OcrBatch %s/%s callback %s: %s after %d attempt(s) %s", *key, event, outcome.state,
                     outcome.attempts, outcome.error)
            cond = C.Condition(decide.CALLBACK, *decide.callback_condition(
                outcome.state, outcome.attempts, outcome.status, outcome.error, outcome.refused))
            recorded = {**st, "callback": record, "conditions": _conditions(batch, st, [cond], ctx.now)}
            await self._write(key, batch, st, recorded, result)
            jobs.forget(key, done)
            result.events.append(told)
            return await self._expire(key, {**batch, "status": recorded}, ctx, result)
        self._callback(key, {**batch, "status": st}, phase, ctx)
        return await self._expire(key, {**batch, "status": st}, ctx, result)

    async def _expire(self, key: Key, batch: Mapping[str, Any], ctx: Context, result: Result) -> Result:
        """spec.ttlSecondsAfterFinished: delete the ended batch once its time is up (the garbage
        collector then deletes its Job, pods and ConfigMap), or look again when it will be."""
        left = decide.expires_in(batch, ctx.now)
        if left is None:
            return result
        if left > 0:
            result.requeue_after = left
            return result
        ns, name = key
        await self.runtime.kube.delete(OCRBATCH.kind, ns, name, uid=batch["metadata"].get("uid"))
        log.info("OcrBatch %s/%s: deleted %ss after it ended (spec.ttlSecondsAfterFinished)", ns, name,
                 batch["spec"]["ttlSecondsAfterFinished"])  # after the delete: a refused one (403) says so instead
        result.writes += 1
        return result

    def _callback(self, key: Key, batch: Mapping[str, Any], phase: str, ctx: Context) -> None:
        event = decide.callback_due(batch, phase)
        if event is None or ctx.jobs is None:
            return

        async def deliver() -> tuple[str, callback.Outcome]:
            return event, await callback.send(self.runtime.kube, key[0], batch, event)

        ctx.jobs.ensure(key, (event, batch["metadata"].get("uid")), deliver,
                        on_error=lambda exc: (event, callback.Outcome("GaveUp", 0, None, str(exc)[:300])))

    async def _deliver_deleted(self, key: Key, batch: Mapping[str, Any], event: str) -> None:
        """A deleted batch's callback: there is no status left to record it in, so it is logged."""
        outcome = await callback.send(self.runtime.kube, key[0], batch, event)
        log.info("OcrBatch %s/%s (deleted) callback %s: %s after %d attempt(s) %s", *key, event, outcome.state,
                 outcome.attempts, outcome.error)


def controller(runtime: Runtime, services: Controller | None = None, *, workers: int = 2,
               settings: render.WorkerSettings | None = None) -> Controller:
    """The OcrBatch controller on `runtime`, beside the OcrService controller `services`."""
    return Controller(runtime, OcrBatches(runtime, services, settings=settings), workers=workers, qps=50, burst=100)
