"""One index of an OcrBatch's Job: list the input, take this index's shard, OCR each document not
done yet, page by page, and write its results, its errors and this index's progress.

The loop keeps `concurrency` pages in flight (over as many documents), waits out 429s and
retries transient failures (retry.py), and writes a document's results only once all its pages
have an outcome, result file last: so a worker killed at any moment loses at most the pages of
the documents it had not finished, and its next run does exactly those again. Decisions are in
the pure modules; this module only sequences them and does the I/O (in threads for the store).

Each document is isolated (failures.py): whatever goes wrong while it is read, split, decoded or
sent is its own errors entry, and the shard goes on; a document that kills the worker is
quarantined by its attempt marker (attempts.py). The stores are patient (patience.py): storage
faults are waited out within the batch's budget. Each failed document's errors are an object of
their own (results.errors_key), written once.

Progress goes three ways, each at most once per interval: progress/index-<n>.<pod>.json in the output
(for users, and kept; one per pod attempt, so that two workers on one shard never overwrite each
other's report), a `{"progress": {...}}` line on stdout (the operator reads the last one
from a running pod's log) and, at exit, the container's termination message (a finished pod's).
program.py starts the worker and maps its end to an exit status (contract.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable, NoReturn

from . import attempts, failures, results
from .budget import ByteBudget
from .client import Answer
from .config import WorkerConfig
from .contract import DOCUMENT_BUDGET, POD_NAME_ENV, PROGRESS_PREFIX
from .documents import CHAT, Part, Split, body_refusal, kind_of, split
from .failures import DocumentError, FatalError
from .patience import Outage, StorageUnavailable
from .progress import Progress, due
from .retry import Done, Fatal, GiveUp, Retry, decide
from .shards import take_shard
from .storage import ObjectTooLarge, Store, StoreError

log = logging.getLogger("ocr_batch_worker")
MAX_RESULT_BYTES = 256 * 1024 * 1024  # a done document's result, read back on restart to count its pages
MAX_MARKER_BYTES = 64 * 1024
PROGRESS_LINE = PROGRESS_PREFIX.encode()  # each report on stdout: {"progress": {...}}
# What stops the worker rather than one document (failures.py).
WORKER_ENDING = (FatalError, StorageUnavailable)
# How long a graceful stop waits for a marker write still in flight before it writes the released
# one: well inside the pod's 30 s grace. Past it the late write may land last, and the document is
# counted as held by a killed worker: the conservative reading.
MARKER_WRITE_WAIT_SECONDS = 10.0
STORAGE_LINE_SECONDS = 1.0  # the most often a storage wait's progress line is written (storage_news)

Send = Callable[[Part, dict[str, str]], Awaitable[Answer]]


def _stdout(report: bytes) -> None:
    sys.stdout.buffer.write(PROGRESS_LINE + report + b"}\n")
    sys.stdout.flush()


class Worker:
    def __init__(self, cfg: WorkerConfig, source: Store, sink: Store, send: Send, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: Callable[[], float] = random.random, emit: Callable[[bytes], None] = _stdout,
                 pod: str = os.environ.get(POD_NAME_ENV, ""), outage: Outage | None = None) -> None:
        """`outage`: the stores' (patience.Outage), whose wait the progress lines carry."""
        self.cfg, self.source, self.sink, self.send, self.emit = cfg, source, sink, send, emit
        self.outage = outage
        self.last_storage_line: float | None = None
        self.storage_version = 0  # the newest outage news applied (Outage.news)
        self.clock, self.sleep, self.rng, self.pod = clock, sleep, rng, pod
        self.progress = Progress(cfg.index, cfg.shards, started_at=clock())
        self.slots = asyncio.Semaphore(cfg.concurrency)
        self.budget = ByteBudget(DOCUMENT_BUDGET * cfg.max_document_bytes)
        self.solo = attempts.Solo()
        self.held: dict[str, attempts.Marker] = {}  # the markers of the documents in flight
        self.marking: dict[str, asyncio.Future[None]] = {}  # their writes not yet done (begin)
        self.write_lock = asyncio.Lock()
        self.last_report: float | None = None

    # --- the loop ---------------------------------------------------------------------------------

    async def run(self) -> Progress:
        if self.outage is not None:
            loop = asyncio.get_running_loop()
            outage = self.outage  # the state as told, read in the failing operation's thread
            outage.listen(lambda: loop.call_soon_threadsafe(self.storage_news, *outage.news()))
        try:  # the check of the input at start: the operator never lists it (it makes no S3 call)
            listing = await asyncio.to_thread(self.source.list, self.cfg.max_documents)
        except StoreError as exc:
            await self.stop(failures.input_unlistable(exc))
        mine = take_shard(listing, self.cfg.index, self.cfg.shards)
        self.progress.documents_total = len(mine)
        log.info("index %d of %d: %d of %d documents", self.cfg.index, self.cfg.shards, len(mine), len(listing))
        await self.report(force=True)
        todo = iter(mine)

        async def lane() -> None:
            for key, size in todo:  # the lanes share one iterator: each document is taken once
                async with self.budget.hold(min(size, self.cfg.max_document_bytes)):
                    await self.document(key, size)

        try:
            async with asyncio.TaskGroup() as lanes:  # a fatal error in one lane cancels the others
                for _ in range(min(self.cfg.concurrency, len(mine))):
                    lanes.create_task(lane())
        except* WORKER_ENDING as group:
            await self.stop(group.exceptions[0])
        self.progress.finished = True
        await self.report(force=True)
        return self.progress

    async def stop(self, fatal: BaseException) -> NoReturn:
        """End the worker with `fatal`: its message (and reason) in the last report, which is also
        the termination message the operator reads (program.py), the markers released."""
        self.progress.fatal = str(fatal)
        self.progress.fatal_reason = getattr(fatal, "reason", None)
        await self.release()
        with contextlib.suppress(FatalError, StorageUnavailable):
            await self.report(force=True)
        raise fatal from None

    async def document(self, key: str, size: int) -> None:
        """One document to its outcome; any failure but one that ends the worker is its errors entry."""
        read: dict[str, str] = {}  # "sha": the content hash, once the document was read
        try:
            await self._document(key, size, read)
        except WORKER_ENDING:
            raise  # its marker stays held: release() says it was not the document's fault
        except DocumentError as exc:
            await self.finish_failed(key, read.get("sha"), str(exc))
        except Exception as exc:  # noqa: BLE001 - per-document isolation: one bad file never ends a shard
            log.warning("%s: %s", key, failures.reason(exc))
            await self.finish_failed(key, read.get("sha"), failures.reason(exc))
        self.held.pop(key, None)  # an outcome: not on a cancel (SIGTERM), whose release() needs it

    async def _document(self, key: str, size: int, read: dict[str, str]) -> None:
        if size > self.cfg.max_document_bytes:  # decided from the listing: not read at all
            await self.finish_failed(key, None, f"the document is {size} bytes; the limit is "
                                     f"{self.cfg.max_document_bytes} (spec.limits.maxDocumentBytes)")
            return
        try:
            data = await asyncio.to_thread(self.source.get, key, self.cfg.max_document_bytes)
        except ObjectTooLarge as exc:
            await self.finish_failed(key, None, f"{exc} (spec.limits.maxDocumentBytes)")
            return
        except StoreError as exc:  # gone since the listing, unreadable
            await self.finish_failed(key, None, f"the document cannot be read: {exc}")
            return
        sha = results.digest(data)
        done_key = results.result_key(key, sha)
        try:
            done = await asyncio.to_thread(self.sink.exists, done_key)
        except StoreError as exc:  # e.g. a key too long for S3 once the suffix is added: this document only
            await self.finish_failed(key, None, f"its result cannot be written: {exc}")
            return
        if done:
            await self.count_done(done_key)
            return
        read["sha"] = sha
        kind_of(key, data)  # an unsupported file fails here, from its first bytes: no marker needed
        plan = await self.plan(key, sha)
        if plan.action == attempts.POISON:
            await self.finish_failed(key, sha, plan.reason)
            return
        async with self.solo.hold(alone=plan.action == "alone"):
            await self.begin(key, sha, plan)
            await self.process(key, sha, data)

    async def process(self, key: str, sha: str, data: bytes) -> None:
        try:
            parts = await asyncio.to_thread(split, key, data, self.cfg.max_pages)
        except DocumentError as exc:
            await self.finish_failed(key, sha, str(exc))
            return
        del data
        self.progress.pages_total += parts.pages
        try:
            outcomes = await asyncio.gather(*(self.page(parts, part) for part in parts.parts))
        finally:
            await asyncio.to_thread(parts.close)
        await self.finish(key, sha, parts, list(zip(parts.parts, outcomes)))

    async def page(self, doc: Split, part: Part) -> Answer:
        """The final answer for one part (a 200, or the one the page fails with)."""
        retries, shed = 0, 0.0
        while True:
            async with self.slots:  # a PDF or TIFF page is cut out only once it has a slot
                try:
                    body = await asyncio.to_thread(doc.body, part)
                except Exception as exc:  # noqa: BLE001 - this page's failure (DocumentError, or a decoder's)
                    self.progress.pages_failed += 1
                    return Answer(None, b"", None, str(exc) if isinstance(exc, DocumentError) else failures.reason(exc))
                refused = body_refusal(part, len(body), self.cfg.max_body_bytes)
                if refused:
                    self.progress.pages_failed += 1
                    return Answer(None, b"", None, refused)
                answer = await self.send(replace(part, body=body), self.cfg.options)
                del body
            step = decide(answer.status, answer.reason, answer.retry_after, retries, shed, self.rng(), self.cfg.retry)
            if isinstance(step, Done):
                self.progress.pages_done += 1
                await self.report()
                return answer
            if isinstance(step, Fatal):
                raise FatalError(step.reason)
            if isinstance(step, GiveUp):
                self.progress.pages_failed += 1
                await self.report()
                return Answer(answer.status, answer.body, None, step.reason)
            assert isinstance(step, Retry)
            if step.shed:
                shed += step.delay
                self.progress.requests_shed += 1
            else:
                retries += 1
                self.progress.retries += 1
            await self.sleep(step.delay)

    # --- attempt markers (attempts.py) ------------------------------------------------------------

    async def plan(self, key: str, sha: str) -> attempts.Plan:
        marker_key = results.attempt_key(self.cfg.index, key)
        marker = None
        if await asyncio.to_thread(self.sink.exists, marker_key):
            marker = attempts.Marker.parse(await asyncio.to_thread(self.sink.get, marker_key, MAX_MARKER_BYTES))
        plan = attempts.plan(marker, sha, self.cfg.concurrency)
        if plan.action != "run":
            log.warning("%s: %s (attempt %d)", key, plan.reason or "an earlier worker died holding it: alone",
                        plan.attempts)
        return plan

    async def begin(self, key: str, sha: str, plan: attempts.Plan) -> None:
        """The marker written before the document is split: a worker killed from now on leaves it.
        Held before the write, which a SIGTERM does not interrupt (its thread would go on anyway):
        one landing during the write still releases the document, after the write (release)."""
        marker = attempts.Marker(key, sha, plan.attempts, plan.action == "alone", pod=self.pod, started_at=self.clock())
        self.held[key] = marker
        write = self.marking[key] = asyncio.ensure_future(
            asyncio.to_thread(self.sink.put, results.attempt_key(self.cfg.index, key), marker.to_json()))
        try:
            await asyncio.shield(write)
        finally:
            if write.done():  # else cancelled mid-write: release() waits for it
                self.marking.pop(key, None)

    async def release(self) -> None:
        """Stopped gracefully (SIGTERM, a fatal error): the documents held were not at fault."""
        for key, marker in list(self.held.items()):
            if (write := self.marking.pop(key, None)) is not None:
                await asyncio.wait([write], timeout=MARKER_WRITE_WAIT_SECONDS)  # the released one lands last
            with contextlib.suppress(StoreError, StorageUnavailable):
                await asyncio.to_thread(self.sink.put, results.attempt_key(self.cfg.index, key),
                                        replace(marker, released=True).to_json())
        self.held.clear()

    # --- outcomes ---------------------------------------------------------------------------------

    async def finish(self, key: str, sha: str, parts: Split, answered: list[tuple[Part, Answer]]) -> None:
        """Write a document's errors (before its results: a crash in between does the document
        again, and its errors object is replaced, not added to), its Markdown, then its result file."""
        bad_lines = parts.errors
        records, errors = [], [results.error_record(key, sha, line, reason) for line, reason in bad_lines]
        read = 0  # parts with a result
        for part, answer in answered:
            record, error = self._record(key, sha, part, answer)
            records.append(record)
            if error:
                errors.append(error)
            else:
                read += 1
        if parts.kind == "jsonl":  # a bad line is a line of the output too, with its custom_id when it has one
            records += [results.chat_record(parts.error_ids.get(line, ""), line, sha, None, None, reason)
                        for line, reason in bad_lines]
            records.sort(key=lambda r: int(r["id"].rsplit("_", 1)[1]))
            self.progress.pages_failed += len(bad_lines)
        else:
            records.sort(key=lambda r: r["page"])
        failed_all = read == 0
        if errors:
            await self.write_errors(key, sha, errors)
        if parts.kind != "jsonl" and not failed_all:
            await asyncio.to_thread(self.sink.put, results.markdown_key(key, sha), results.markdown(key, records))
        await self.write_output(results.result_key(key, sha), results.jsonl(records))
        if failed_all:  # not one page read: the document failed, whatever its pages' reasons
            self.progress.documents_failed += 1
        else:
            self.progress.documents_done += 1
        await self.report()

    def _record(self, key: str, sha: str, part: Part, answer: Answer) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The result line of one part, and its errors-file entry when it failed."""
        status, reason = answer.status, answer.reason
        if status == 200:
            try:
                body = json.loads(answer.body)
                if part.endpoint == CHAT:
                    return results.chat_record(part.custom_id or "", part.page, sha, 200, body, None), None
                return results.page_record(key, sha, part.page, body), None
            except (ValueError, KeyError, TypeError, RecursionError) as exc:  # counted done when it came: it failed
                self.progress.pages_done -= 1
                self.progress.pages_failed += 1
                body, reason = None, f"the server's answer could not be read: {exc}"
        else:
            body = _json_or_none(answer.body)
        error = results.error_record(key, sha, part.page, reason, status)
        if part.endpoint == CHAT:
            return results.chat_record(part.custom_id or "", part.page, sha, status, body, reason), error
        return error, error

    async def finish_failed(self, key: str, sha: str | None, reason: str) -> None:
        """A document that produced no request: its errors object (page null); when it was read,
        a result file holding that entry, so that a restarted worker does not read it again."""
        log.info("%s: %s", key, reason)
        entry = results.error_record(key, sha, None, reason)
        errors_key = results.errors_key(self.cfg.index, key, sha)
        # A document never read (too large) is decided again by every run: written by the first only.
        if sha is not None or not await asyncio.to_thread(self.sink.exists, errors_key):
            await self.write_output(errors_key, results.jsonl([entry]))
        if sha is not None:
            await self.write_output(results.result_key(key, sha), results.jsonl([entry]))
        self.progress.documents_failed += 1
        await self.report()

    async def count_done(self, done_key: str) -> None:
        """A document an earlier run finished: counted from its result file, not done again."""
        data = await asyncio.to_thread(self.sink.get, done_key, MAX_RESULT_BYTES)
        done, failed, document_failed = results.count_result(data)
        self.progress.documents_skipped += 1
        if document_failed:
            self.progress.documents_failed += 1
        else:
            self.progress.documents_done += 1
        self.progress.pages_total += done + failed
        self.progress.pages_done += done
        self.progress.pages_failed += failed
        await self.report()

    async def write_errors(self, key: str, sha: str, entries: list[dict[str, Any]]) -> None:
        """The document's errors as one object of its own: never a rewrite of the others'."""
        await self.write_output(results.errors_key(self.cfg.index, key, sha), results.jsonl(entries))

    async def write_output(self, key: str, data: bytes) -> None:
        """A write to the output; one that fails (past the storage's retries) ends the worker:
        every other document's would fail alike."""
        try:
            await asyncio.to_thread(self.sink.put, key, data)
        except StoreError as exc:
            raise FatalError(f"the output cannot be written: {exc}") from None

    async def report(self, force: bool = False) -> None:
        """Write the progress file when one is due (coalesced: at most one per interval), and the
        same report as one line on stdout, where the operator reads it from the pod's log (it
        cannot read a PVC). The line comes first: the file's write may wait out an outage."""
        now = self.clock()
        if not force and not due(now, self.last_report, self.cfg.progress_interval):
            return
        async with self.write_lock:
            self.last_report = now
            self.progress.updated_at = now
            report = self.progress.to_json()
            self.emit(report)
            try:
                await asyncio.to_thread(self.sink.put, results.progress_key(self.cfg.index, self.pod), report)
            except StoreError as exc:
                raise FatalError(f"the output cannot be written: {exc}") from None

    def storage_news(self, version: int, state: dict[str, Any] | None) -> None:
        """The stores' outage changed to `state` (patience.Outage's listener, on the event loop; read
        when told, so that a try failed again before the loop got here keeps its own line, and a
        state arriving after a newer one is dropped): the report
        carries it, and a progress line says so when the outage starts or ends, and at most once a
        second (or per progress interval, if shorter) while its tries go on: each try logs a warning,
        and the operator reads the last progress line of the log's last lines. Only the line: the
        file is on the storage that may be down. The failed tries are the worker's progress for the
        operator's stall rule: it is alive, and its budget (limits.storageRetrySeconds) bounds the wait."""
        if version <= self.storage_version:
            return
        self.storage_version = version
        was, self.progress.storage = self.progress.storage, state
        now = self.clock()
        if (was is None) == (self.progress.storage is None) and \
                not due(now, self.last_storage_line, min(self.cfg.progress_interval, STORAGE_LINE_SECONDS)):
            return
        self.last_storage_line = now
        self.progress.updated_at = now
        self.emit(self.progress.to_json())


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except (ValueError, RecursionError):
        return None
