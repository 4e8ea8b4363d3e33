"""The OcrBatch controller: the same core as the OcrService's (controller.py), for batches.

Watch events (handlers.py) feed its caches of OcrBatches, their Jobs and their worker pods and
queue the batch's key on news; the work queue (workqueue.py: de-duplicated, one reconcile per key
at a time, rate-limited), delayed wake-ups and the Event recorder (events.py) are the core's. The
OcrService, its Service and the cache of what the OcrService controller already watches are read
from that controller (`core`), so a batch adds no watch of its own on them.

A reconcile decides with batch/decide.py and writes at most: the ConfigMap and the Job (once, after
the preflight found everything the batch needs), a Job deletion (cancel), and one status merge
patch when the status changed. Progress is coalesced: a running worker's log is read at most once
per PROGRESS_SECONDS (its last `{"progress": ...}` line), a finished one's termination message
from the pod cache, so the status is written at most once per interval plus once per transition,
never per page. The completion callback is delivered by its own task (batch/callback.py); its
outcome is written to status.callback, so it is sent once.

Only the operator writes an OcrBatch's status, so the status it last wrote (kept per uid) is the
truth, whatever older watch events still arrive.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import logging
import os
import time
from typing import Any, Mapping

from .. import conditions as C
from .. import status as service_status
from ..cache import slim
from ..events import Recorder
from ..kube import ApiError, Kube
from ..workqueue import WorkQueue
from . import callback, decide, render
from .progress import summarize

log = logging.getLogger(__name__)

Key = tuple[str, str]
PROGRESS_SECONDS = float(os.environ.get("OCR_OPERATOR_BATCH_PROGRESS_SECONDS", "10"))
# How soon a batch held back by its preflight looks again (the OcrService, a PVC or a Secret may appear).
PREFLIGHT_RETRY_SECONDS = float(os.environ.get("OCR_OPERATOR_BATCH_PREFLIGHT_SECONDS", "15"))
LOG_TAIL_LINES, LOG_LIMIT_BYTES = 50, 64 * 1024
S3_CHECK_SECONDS = 20.0
READY = "Ready"


def iso(now: dt.datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


async def s3_input_error(s3: Mapping[str, Any], secret_data: Mapping[str, str]) -> str | None:
    """Why the S3 input cannot be listed (no such bucket or prefix, credentials refused, no answer),
    or None: the workers' own check (worker.open_store, S3Store.list), made once before the Job."""
    from .config import ConfigError, Location
    from .storage import StoreError, TooManyObjects
    from .worker import open_store

    env = {f"INPUT_{k}": base64.b64decode(v).decode(errors="replace") for k, v in secret_data.items()
           if k.startswith("AWS_")}

    def check() -> str | None:
        try:
            open_store(Location("s3", s3["url"]), "input", env).list(1)
        except TooManyObjects:
            return None  # more than one object: it exists
        except (ConfigError, StoreError) as exc:
            return str(exc)[:500]
        return None

    try:
        return await asyncio.wait_for(asyncio.to_thread(check), S3_CHECK_SECONDS)
    except asyncio.TimeoutError:
        return f"{s3['url']} did not answer within {S3_CHECK_SECONDS:.0f} s"


def worker_settings(env: Mapping[str, str] = os.environ) -> render.WorkerSettings:
    """The workers' image: OCR_OPERATOR_BATCH_IMAGE (the chart sets the operator's own image)."""
    return render.WorkerSettings(
        image=env.get("OCR_OPERATOR_BATCH_IMAGE", ""),
        image_pull_policy=env.get("OCR_OPERATOR_BATCH_IMAGE_PULL_POLICY", "IfNotPresent"),
        progress_interval=min(PROGRESS_SECONDS, 10.0))


class BatchController:
    def __init__(self, kube: Kube, core: Any = None, *, settings: render.WorkerSettings | None = None,
                 workers: int = 2, progress_seconds: float = PROGRESS_SECONDS) -> None:
        self.kube = kube
        self.core = core  # the OcrService Controller (its cache and child store), when running beside it
        self.settings = settings or worker_settings()
        self.workers = workers
        self.progress_seconds = progress_seconds
        self.cache: dict[Key, dict[str, Any]] = {}
        self.written: dict[Key, tuple[str, dict[str, Any]]] = {}  # uid, the status we last wrote
        self.jobs: dict[Key, dict[str, Any] | None] = {}
        self.pods: dict[Key, dict[str, dict[str, Any]]] = {}
        self.reports: dict[Key, dict[int, dict[str, Any]]] = {}  # last progress report per index
        self.progress_read: dict[Key, float] = {}
        self.deliveries: dict[Key, asyncio.Task] = {}
        self.deleted_deliveries: set[asyncio.Task] = set()  # callbacks of batches that are gone
        self.queue: WorkQueue[Key] = WorkQueue(qps=50, burst=100)
        self.recorder = Recorder(self._post_event, self._bump_event)
        self.timers: dict[Key, asyncio.TimerHandle] = {}
        self.failures: dict[Key, int] = {}
        self.tasks: list[asyncio.Task] = []
        self.reconciles = 0

    # ------------------------------------------------------------------ feeding
    def batch_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        md = obj.get("metadata") or {}
        key = (md.get("namespace") or "", md.get("name") or "")
        if event_type == "DELETED":
            # The Job and its pods go with it (owner reference): deleting cancels, and the callback
            # says so (best effort: a deletion while the operator is down sends nothing).
            known = self.cache.get(key)
            same = known is not None and known["metadata"].get("uid") == md.get("uid")
            last = {**known, "status": self.current_status(key, known)} if same else dict(obj)
            self.forget(key)
            due = decide.callback_on_delete(last)
            if due is not None:
                event, status = due
                task = asyncio.create_task(self._deliver_deleted(key, {**last, "status": status}, event),
                                           name=f"ocr-batch-callback-deleted-{key[1]}")
                self.deleted_deliveries.add(task)
                task.add_done_callback(self.deleted_deliveries.discard)
            return
        cached = self.cache.get(key)
        changed = cached is None or (cached["metadata"].get("generation"), cached["metadata"].get("uid")) != (
            md.get("generation"), md.get("uid"))
        self.cache[key] = slim(obj)
        self.queue.add(key, urgent=changed)

    def job_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        key = self._owner_key(obj)
        if key is None:
            return
        self.jobs[key] = None if event_type == "DELETED" else slim(obj)
        self._wake(key)

    def pod_event(self, event_type: str | None, obj: Mapping[str, Any]) -> None:
        key = self._owner_key(obj)
        if key is None:
            return
        name = obj["metadata"]["name"]
        group = self.pods.setdefault(key, {})
        if event_type == "DELETED":
            group.pop(name, None)
        else:
            group[name] = slim({**obj, "kind": "Pod"})
        self._wake(key)

    @staticmethod
    def _owner_key(obj: Mapping[str, Any]) -> Key | None:
        md = obj.get("metadata") or {}
        batch = (md.get("labels") or {}).get(render.LABEL_BATCH)
        return (md.get("namespace") or "", batch) if batch else None

    def _wake(self, key: Key) -> None:
        if key in self.cache:
            self.queue.add(key)

    def forget(self, key: Key) -> None:
        body = self.cache.pop(key, None)
        for table in (self.written, self.jobs, self.pods, self.reports, self.progress_read, self.failures):
            table.pop(key, None)
        self.queue.forget(key)
        if (timer := self.timers.pop(key, None)) is not None:
            timer.cancel()
        if (task := self.deliveries.pop(key, None)) is not None:
            task.cancel()
        if body is not None:
            self.recorder.forget(body["metadata"].get("uid") or "")

    def enqueue_after(self, key: Key, delay: float) -> None:
        if (timer := self.timers.pop(key, None)) is not None:
            timer.cancel()
        self.timers[key] = asyncio.get_running_loop().call_later(max(0.0, delay), self._fire, key)

    def _fire(self, key: Key) -> None:
        self.timers.pop(key, None)
        self._wake(key)

    # ------------------------------------------------------------------ running
    def start(self) -> None:
        self.recorder.start()
        self.tasks = [asyncio.create_task(self.queue.serve(self._run), name=f"ocr-batch-{i}")
                      for i in range(self.workers)]

    async def stop(self) -> None:
        pending = [*self.tasks, *self.deliveries.values(), *self.deleted_deliveries]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for timer in self.timers.values():
            timer.cancel()
        await self.recorder.stop()

    async def _run(self, key: Key) -> None:
        if key not in self.cache:
            return
        try:
            await self.reconcile(key)
        except Exception as exc:  # an API error or a bug: retry with backoff, never kill the worker
            n = self.failures[key] = self.failures.get(key, 0) + 1
            delay = min(60.0, 0.5 * 2 ** (n - 1))
            if isinstance(exc, ApiError):
                log.warning("reconcile of OcrBatch %s/%s: %s; retrying in %.1fs", *key, exc, delay)
            else:
                log.exception("reconcile of OcrBatch %s/%s failed; retrying in %.1fs", *key, delay)
            self.enqueue_after(key, delay)
            return
        self.failures.pop(key, None)
        self.reconciles += 1

    def current_status(self, key: Key, batch: Mapping[str, Any]) -> dict[str, Any]:
        written = self.written.get(key)
        if written is not None and written[0] == batch["metadata"].get("uid"):
            return written[1]
        return dict(batch.get("status") or {})

    async def reconcile(self, key: Key) -> None:
        batch = self.cache[key]
        ns, name = key
        st = self.current_status(key, batch)
        now = dt.datetime.now(dt.timezone.utc)
        phase = st.get("phase")
        if phase in decide.TERMINAL:
            self._callback(key, {**batch, "status": st}, phase)
            return
        job = await self._job(ns, name)
        if job is not None and not decide.owned(job, batch):
            await self._hold(key, batch, st, decide.job_conflict(render.job_name(name)), now)
            return
        if decide.cancel_requested(batch):
            if job is not None and not (job.get("metadata") or {}).get("deletionTimestamp"):
                await self.kube.delete("Job", ns, render.job_name(name), uid=job["metadata"].get("uid"))
            summary = self._summary(key, batch) if job is not None else None
            await self._end(key, batch, st, decide.Phase(decide.CANCELLED, "Cancelled",
                                                         "spec.cancel: the workers were stopped; the results "
                                                         "written so far are kept"), summary, now)
            return
        if job is None:
            if st.get("jobName"):
                await self._end(key, batch, st, decide.Phase(decide.FAILED, "JobDeleted",
                                                             f"Job {st['jobName']} was deleted"), None, now)
                return
            await self._start(key, batch, st, now)
            return
        if key not in self.progress_read or time.monotonic() - self.progress_read[key] >= self.progress_seconds:
            await self._read_logs(key)
        summary = self._summary(key, batch)
        ph = decide.phase_of(job, summary)
        if ph.phase in decide.TERMINAL:
            await self._end(key, batch, st, ph, summary, now)
            return
        new = {**st, "phase": ph.phase, **decide.progress_status(summary)}
        new["conditions"] = self._conditions(batch, st, [C.Condition(READY, C.TRUE, ph.reason, ph.message)], now)
        await self._write(key, batch, st, new)
        self.enqueue_after(key, self.progress_seconds)

    # ------------------------------------------------------------------ steps
    async def _job(self, ns: str, name: str) -> dict[str, Any] | None:
        key = (ns, name)
        if key not in self.jobs:
            self.jobs[key] = await self.kube.get("Job", ns, render.job_name(name))
        return self.jobs[key]

    async def _lookup(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        """From the OcrService controller's caches when it holds the object, else one GET."""
        core = self.core
        if core is not None:
            if kind == "OcrService" and (ns, name) in core.cache:
                return core.cache[(ns, name)]
            if kind == "Service" and core.store.known(("Service", ns, name)):
                return core.store.get(("Service", ns, name))
        return await self.kube.get(kind, ns, name)

    async def _preflight(self, batch: Mapping[str, Any]) -> tuple[decide.Missing | None, decide.Found]:
        ns, spec = batch["metadata"]["namespace"], batch["spec"]
        service = await self._lookup("OcrService", ns, spec["service"])
        endpoint = await self._lookup("Service", ns, spec["service"]) if service is not None else None
        claims = {claim: (await self.kube.get("PersistentVolumeClaim", ns, claim)) is not None
                  for _, claim in decide.needed_claims(spec)}
        secrets: dict[str, Mapping[str, Any] | None] = {}
        for _, secret, _ in decide.needed_secrets(spec, service):
            if secret not in secrets:
                got = await self.kube.get("Secret", ns, secret)
                secrets[secret] = None if got is None else (got.get("data") or {})
        found = decide.Found(service, endpoint, claims, secrets)
        missing = decide.preflight(spec, found)
        if missing is None and "s3" in spec["input"]:
            error = await s3_input_error(spec["input"]["s3"], secrets.get(spec["input"]["s3"]["credentialsSecret"]) or {})
            missing = decide.preflight(spec, dataclasses.replace(found, input_error=error))
        return missing, found

    async def _start(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], now: dt.datetime) -> None:
        ns, name = key
        missing, found = await self._preflight(batch)
        if missing is not None:
            await self._hold(key, batch, st, missing, now)
            return
        if not self.settings.image:
            raise RuntimeError("OCR_OPERATOR_BATCH_IMAGE is not set: the operator does not know the workers' image")
        assert found.service is not None and found.service_endpoint is not None
        tls_secret = decide.service_tls(found.service)
        tls = None if tls_secret is None else render.Tls(
            tls_secret, decide.trust_key(found.secrets.get(tls_secret) or {}), decide.server_name(batch["spec"]["service"], ns))
        url = decide.service_url(found.service_endpoint, https=tls is not None)
        svc_spec = found.service.get("spec") or {}
        auth = decide.service_auth(found.service)
        await self.kube.apply(render.render_configmap(batch, url, self.settings, api_key=auth is not None, tls=tls))
        body = render.render_job(batch, self.settings, placement=svc_spec, api_key=auth, tls=tls)
        try:
            job = await self.kube.create("Job", ns, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            job = await self.kube.get("Job", ns, render.job_name(name))
            self.jobs[key] = job
            if job is None or not decide.owned(job, batch):
                await self._hold(key, batch, st, decide.job_conflict(render.job_name(name)), now)
                return
        self.jobs[key] = job
        log.info("OcrBatch %s/%s: Job %s created (%s worker(s) -> %s)", ns, name, render.job_name(name),
                 batch["spec"].get("parallelism", 1), url)
        new = {**st, "phase": decide.PENDING, "jobName": render.job_name(name), "startTime": iso(now)}
        new["conditions"] = self._conditions(batch, st, [C.Condition(READY, C.TRUE, "JobCreated",
                                                                     f"Job {render.job_name(name)} sends the pages "
                                                                     f"to {url}")], now)
        await self._write(key, batch, st, new)
        self.recorder.emit(batch, "Normal", "Started", f"Job {render.job_name(name)}: "
                           f"{batch['spec'].get('parallelism', 1)} worker(s) for OcrService {batch['spec']['service']}",
                           now)
        self.enqueue_after(key, self.progress_seconds)

    async def _hold(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], missing: decide.Missing,
                    now: dt.datetime) -> None:
        """Pending, the Ready condition naming what is missing; look again after PREFLIGHT_RETRY_SECONDS."""
        new = {**st, "phase": decide.PENDING}
        new["conditions"] = self._conditions(batch, st, [C.Condition(READY, C.FALSE, missing.reason,
                                                                     missing.message)], now)
        if (st.get("conditions") or [{}])[0].get("reason") != missing.reason:
            log.info("OcrBatch %s/%s held back: %s", *key, missing.message)
        await self._write(key, batch, st, new)
        self.enqueue_after(key, PREFLIGHT_RETRY_SECONDS)

    async def _read_logs(self, key: Key) -> None:
        """The last progress line of each running worker (one log read per worker per interval)."""
        self.progress_read[key] = time.monotonic()
        ns = key[0]
        for index, pod in decide.latest_per_index(self.pods.get(key, {}).values()).items():
            if not decide.running(pod):
                continue
            try:
                text = await self.kube.read_log(ns, pod["metadata"]["name"], tail_lines=LOG_TAIL_LINES,
                                                limit_bytes=LOG_LIMIT_BYTES)
            except ApiError as exc:
                log.debug("no log of %s/%s: %s", ns, pod["metadata"]["name"], exc)
                continue
            report = decide.report_from_log(text)
            if report is not None:
                self.reports.setdefault(key, {})[index] = report

    def _summary(self, key: Key, batch: Mapping[str, Any]):
        """The batch's progress from its finished workers' termination messages and the reports read."""
        reports = self.reports.setdefault(key, {})
        for index, pod in decide.latest_per_index(self.pods.get(key, {}).values()).items():
            done = decide.terminated(pod)
            report = decide.report_from_message((done or {}).get("message"))
            if report is not None:
                reports[index] = report
            elif done and done.get("exitCode") not in (0, 143) and index in reports and done.get("message"):
                reports[index] = {**reports[index], "fatal": done["message"][:1000]}
        return summarize(list(reports.values()), int(batch["spec"].get("parallelism", 1)))

    async def _end(self, key: Key, batch: Mapping[str, Any], st: dict[str, Any], ph: decide.Phase, summary,
                   now: dt.datetime) -> None:
        new = {**st, "phase": ph.phase, "completionTime": iso(now)}
        if summary is not None:
            new.update(decide.progress_status(summary))
            new["pagesPerSecond"], new["eta"] = "0.00", ""
        conds = [C.Condition(READY, C.FALSE, ph.reason, ph.message),
                 C.Condition(decide.END_CONDITION[ph.phase], C.TRUE, ph.reason, ph.message)]
        new["conditions"] = self._conditions(batch, st, conds, now)
        await self._write(key, batch, st, new)
        log.info("OcrBatch %s/%s %s: %s", *key, ph.phase, ph.message)
        self.recorder.emit(batch, "Normal" if ph.phase == decide.SUCCEEDED else "Warning", ph.phase, ph.message, now)
        self._callback(key, {**batch, "status": new}, ph.phase)

    @staticmethod
    def _conditions(batch: Mapping[str, Any], st: Mapping[str, Any], new: list[C.Condition],
                    now: dt.datetime) -> list[dict[str, Any]]:
        merged, _ = C.merge(st.get("conditions"), new, generation=batch["metadata"].get("generation") or 0,
                            now=iso(now))
        return merged

    async def _write(self, key: Key, batch: Mapping[str, Any], st: Mapping[str, Any], new: dict[str, Any]) -> None:
        new = {**new, "observedGeneration": batch["metadata"].get("generation")}
        if new == st:
            return
        ns, name = key
        await self.kube.merge_patch("OcrBatch", ns, name, {"status": new}, subresource="status")
        self.written[key] = (batch["metadata"].get("uid") or "", new)

    # ------------------------------------------------------------------ callback
    def _callback(self, key: Key, batch: Mapping[str, Any], phase: str) -> None:
        event = decide.callback_due(batch, phase)
        if event is None or key in self.deliveries:
            return
        self.deliveries[key] = asyncio.create_task(self._deliver(key, batch, event), name=f"ocr-batch-callback-{key[1]}")

    async def _send(self, ns: str, batch: Mapping[str, Any], event: str) -> callback.Outcome:
        """POST the event to spec.callback.url, signed with the Secret's key, retried (callback.deliver)."""
        cb = batch["spec"]["callback"]
        hmac_key = None
        try:
            if cb.get("secretRef"):
                ref = cb["secretRef"]
                secret = await self.kube.get("Secret", ns, ref["name"])
                value = ((secret or {}).get("data") or {}).get(ref.get("key") or "secret")
                if value is None:
                    raise ValueError(f"spec.callback.secretRef: Secret {ref['name']} has no key "
                                     f"{ref.get('key') or 'secret'}")
                hmac_key = base64.b64decode(value)[:callback.MAX_KEY_BYTES]
            now = dt.datetime.now(dt.timezone.utc)
            return await callback.deliver(cb["url"], callback.payload(batch, event, now), hmac_key)
        except (ApiError, ValueError) as exc:
            return callback.Outcome("GaveUp", 0, None, str(exc)[:300])

    async def _deliver_deleted(self, key: Key, batch: Mapping[str, Any], event: str) -> None:
        """A deleted batch's callback: there is no status left to record it in, so it is logged."""
        outcome = await self._send(key[0], batch, event)
        log.info("OcrBatch %s/%s (deleted) callback %s: %s after %d attempt(s) %s", *key, event, outcome.state,
                 outcome.attempts, outcome.error)

    async def _deliver(self, key: Key, batch: Mapping[str, Any], event: str) -> None:
        cb = batch["spec"]["callback"]
        outcome = await self._send(key[0], batch, event)
        record = {"event": event, "id": callback.idempotency_key(batch, event), "state": outcome.state,
                  "attempts": outcome.attempts, "time": iso(dt.datetime.now(dt.timezone.utc))}
        if outcome.status is not None:
            record["lastStatus"] = outcome.status
        if outcome.error:
            record["error"] = outcome.error
        current = self.cache.get(key)
        if current is None or current["metadata"].get("uid") != batch["metadata"].get("uid"):
            return
        st = self.current_status(key, current)
        log.info("OcrBatch %s/%s callback %s: %s after %d attempt(s) %s", *key, event, outcome.state,
                 outcome.attempts, outcome.error)
        try:
            await self._record_callback(key, current, st, record)
        finally:
            self.deliveries.pop(key, None)
        self.recorder.emit(current, "Normal" if outcome.state == "Delivered" else "Warning",
                           f"Callback{outcome.state}", f"{event} to {cb['url']}: {outcome.state.lower()} after "
                           f"{outcome.attempts} attempt(s)" + (f" ({outcome.error})" if outcome.error else ""),
                           dt.datetime.now(dt.timezone.utc))

    async def _record_callback(self, key: Key, batch: Mapping[str, Any], st: Mapping[str, Any],
                               record: dict[str, Any]) -> None:
        """status.callback, its write retried a few times: it decides whether the callback is sent again."""
        for attempt in range(5):
            try:
                await self._write(key, batch, st, {**st, "callback": record})
                return
            except ApiError as exc:
                if attempt == 4:
                    raise
                log.warning("status.callback of %s/%s not written: %s", *key, exc)
                await asyncio.sleep(2 ** attempt)

    # ------------------------------------------------------------------ events I/O
    async def _post_event(self, item) -> dict[str, Any]:
        return await service_status.post_event(self.kube, item.owner, item.type, item.reason, item.message, item.now)

    async def _bump_event(self, namespace: str, name: str, count: int, now: dt.datetime) -> None:
        await service_status.bump_event(self.kube, namespace, name, count, now)

