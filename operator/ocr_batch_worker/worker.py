"""One index of an OcrBatch's Job: list the input, take this index's shard, OCR each document not
done yet, page by page, and write its results, its errors and this index's progress.

The loop keeps `concurrency` pages in flight (over as many documents), waits out 429s and
retries transient failures (retry.py), and writes a document's results only once all its pages
have an outcome, result file last: so a worker killed at any moment loses at most the pages of
the documents it had not finished, and its next run does exactly those again. Decisions are in
the pure modules; this module only sequences them and does the I/O (in threads for the store).

Progress goes three ways, each at most once per interval: progress/index-<n>.json in the output
(for users, and kept), a `{"progress": {...}}` line on stdout (the operator reads the last one
from a running pod's log) and, at exit, the container's termination message (a finished pod's).

Exit status (contract.py): 0 when every owned document has an outcome (failed pages included:
they are in the errors file), 1 on a fatal error (configuration, the input unreadable, the
OcrService refusing every request with 401/403), 143 on SIGTERM (cancel, or a node draining)
after writing the progress file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import sys
import time
from dataclasses import replace
from typing import Any, Awaitable, Callable

from ocr_limits import split_keys

from . import results
from .budget import ByteBudget
from .client import Answer, OcrClient
from .config import ConfigError, WorkerConfig, load
from .contract import DOCUMENT_BUDGET, EXIT_DONE, EXIT_FATAL, EXIT_TERMINATED, PROGRESS_PREFIX, TERMINATION_LOG
from .documents import CHAT, DocumentError, Part, Split, split
from .progress import Progress, due
from .retry import Done, Fatal, GiveUp, Retry, decide
from .shards import take_shard
from .storage import ObjectTooLarge, Store, StoreError, open_store

log = logging.getLogger("ocr_batch_worker")
MAX_RESULT_BYTES = 256 * 1024 * 1024  # a done document's result, read back on restart to count its pages
MAX_ERRORS_BYTES = 256 * 1024 * 1024
PROGRESS_LINE = PROGRESS_PREFIX.encode()  # each report on stdout: {"progress": {...}}

Send = Callable[[Part, dict[str, str]], Awaitable[Answer]]


class FatalError(Exception):
    """Every further request would fail the same way: stop the worker."""


def _stdout(report: bytes) -> None:
    sys.stdout.buffer.write(PROGRESS_LINE + report + b"}\n")
    sys.stdout.flush()


def write_termination_message(progress: Progress, path: str) -> None:
    """The last report as the container's termination message (Kubernetes keeps it in the pod's
    status, at most 4096 bytes), where the operator reads a finished index's counts; skipped
    outside a pod, where the file does not exist."""
    if os.path.exists(path):
        with contextlib.suppress(OSError), open(path, "wb") as f:
            f.write(progress.to_json()[:4096])


class Worker:
    def __init__(self, cfg: WorkerConfig, source: Store, sink: Store, send: Send, *,
                 clock: Callable[[], float] = time.time, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 rng: Callable[[], float] = random.random, emit: Callable[[bytes], None] = _stdout) -> None:
        self.cfg, self.source, self.sink, self.send, self.emit = cfg, source, sink, send, emit
        self.clock, self.sleep, self.rng = clock, sleep, rng
        self.progress = Progress(cfg.index, cfg.shards, started_at=clock())
        self.errors: list[dict[str, Any]] = []
        self.slots = asyncio.Semaphore(cfg.concurrency)
        self.budget = ByteBudget(DOCUMENT_BUDGET * cfg.max_document_bytes)
        self.write_lock = asyncio.Lock()
        self.last_report: float | None = None

    # --- the loop ---------------------------------------------------------------------------------

    async def run(self) -> Progress:
        try:
            listing = await asyncio.to_thread(self.source.list, self.cfg.max_documents)
        except StoreError as exc:
            raise FatalError(f"the input cannot be listed: {exc}") from None
        mine = take_shard(listing, self.cfg.index, self.cfg.shards)
        self.progress.documents_total = len(mine)
        self.errors = await self._read_errors()
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
        except* (FatalError, StoreError) as group:  # the output unwritable is as fatal as a 401
            fatal = group.exceptions[0]
            self.progress.fatal = str(fatal)
            with contextlib.suppress(StoreError):
                await self.report(force=True)
            raise fatal from None
        self.progress.finished = True
        await self.report(force=True)
        return self.progress

    async def document(self, key: str, size: int) -> None:
        if size > self.cfg.max_document_bytes:  # decided from the listing: not read at all
            await self.finish_failed(key, None, f"the document is {size} bytes; the limit is "
                                     f"{self.cfg.max_document_bytes} (spec.limits.maxDocumentBytes)")
            return
        try:
            data = await asyncio.to_thread(self.source.get, key, self.cfg.max_document_bytes)
        except ObjectTooLarge as exc:
            await self.finish_failed(key, None, f"{exc} (spec.limits.maxDocumentBytes)")
            return
        except StoreError as exc:  # gone since the listing
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
        await self.finish(key, sha, parts.kind, list(zip(parts.parts, outcomes)), parts.errors)

    async def page(self, doc: Split, part: Part) -> Answer:
        """The final answer for one part (a 200, or the one the page fails with)."""
        retries, shed = 0, 0.0
        while True:
            async with self.slots:  # a PDF page is cut out only once it has a slot: at most `concurrency` exist
                try:
                    body = await asyncio.to_thread(doc.body, part)
                except DocumentError as exc:
                    self.progress.pages_failed += 1
                    return Answer(None, b"", None, str(exc))
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

    # --- outcomes ---------------------------------------------------------------------------------

    async def finish(self, key: str, sha: str, kind: str, answered: list[tuple[Part, Answer]],
                     bad_lines: list[tuple[int, str]]) -> None:
        """Write a document's errors (before its results: a crash in between does the document
        again, and the errors file keeps one entry per page), its Markdown, then its result file."""
        records, errors = [], [results.error_record(key, sha, line, reason) for line, reason in bad_lines]
        for part, answer in answered:
            record, error = self._record(key, sha, part, answer)
            records.append(record)
            if error:
                errors.append(error)
        if kind == "jsonl":  # a bad line is a line of the output too, without a custom_id
            records += [results.chat_record("", line, sha, None, None, reason) for line, reason in bad_lines]
            records.sort(key=lambda r: int(r["id"].rsplit("_", 1)[1]))
            self.progress.pages_failed += len(bad_lines)
        else:
            records.sort(key=lambda r: r["page"])
        failed_all = not answered or all(a.status != 200 for _, a in answered)
        if errors:
            await self.add_errors(errors)
        if kind != "jsonl" and not failed_all:
            await asyncio.to_thread(self.sink.put, results.markdown_key(key, sha), results.markdown(key, records))
        await asyncio.to_thread(self.sink.put, results.result_key(key, sha), results.jsonl(records))
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
            except (ValueError, KeyError, TypeError) as exc:  # counted done when it came: it failed
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
        """A document that produced no request: one errors entry (page null); when it was read,
        a result file holding that entry, so that a restarted worker does not read it again."""
        log.info("%s: %s", key, reason)
        entry = results.error_record(key, sha, None, reason)
        await self.add_errors([entry])
        if sha is not None:
            await asyncio.to_thread(self.sink.put, results.result_key(key, sha), results.jsonl([entry]))
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

    async def add_errors(self, entries: list[dict[str, Any]]) -> None:
        async with self.write_lock:
            merged = results.merge_errors(self.errors, entries)
            if merged == self.errors:  # known already (a document too large, decided again): nothing to write
                return
            self.errors = merged
            await asyncio.to_thread(self.sink.put, results.errors_key(self.cfg.index), results.jsonl(self.errors))

    async def _read_errors(self) -> list[dict[str, Any]]:
        key = results.errors_key(self.cfg.index)
        if not await asyncio.to_thread(self.sink.exists, key):
            return []
        return results.parse_jsonl(await asyncio.to_thread(self.sink.get, key, MAX_ERRORS_BYTES))

    async def report(self, force: bool = False) -> None:
        """Write the progress file when one is due (coalesced: at most one per interval), and the
        same report as one line on stdout, where the operator reads it from the pod's log (it
        cannot read a PVC)."""
        now = self.clock()
        if not force and not due(now, self.last_report, self.cfg.progress_interval):
            return
        async with self.write_lock:
            self.last_report = now
            self.progress.updated_at = now
            report = self.progress.to_json()
            await asyncio.to_thread(self.sink.put, results.progress_key(self.cfg.index), report)
            self.emit(report)


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def first_key(text: str) -> str | None:
    """The first key of an API keys file as the server reads it (ocr_limits.split_keys): an
    OcrService's spec.auth Secret may hold several."""
    keys = split_keys(text)
    return keys[0] if keys else None


def _api_key(cfg: WorkerConfig) -> str | None:
    if not cfg.api_key_file:
        return None
    try:
        with open(cfg.api_key_file, encoding="utf-8") as f:
            key = first_key(f.read(64 * 1024))
    except OSError as exc:
        raise ConfigError(f"apiKeyFile: {cfg.api_key_file} cannot be read: {exc.strerror}") from None
    if key is None:
        raise ConfigError(f"apiKeyFile: {cfg.api_key_file} holds no key")
    return key


async def serve(cfg: WorkerConfig) -> Progress:
    client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=cfg.request_timeout,
                       api_key=_api_key(cfg), ca_file=cfg.ca_file, server_name=cfg.server_name)
    worker = None
    try:
        worker = Worker(cfg, open_store(cfg.input, "input"), open_store(cfg.output, "output"), client.send)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await worker.run()
        except asyncio.CancelledError:
            await worker.report(force=True)
            raise
    finally:
        await client.close()
        if worker is not None:
            write_termination_message(worker.progress, os.environ.get("TERMINATION_LOG", TERMINATION_LOG))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        cfg = load()
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        return EXIT_FATAL
    try:
        progress = asyncio.run(serve(cfg))
    except (FatalError, ConfigError, StoreError) as exc:
        log.error("stopped: %s", exc)
        return EXIT_FATAL
    except asyncio.CancelledError:
        log.warning("stopped by SIGTERM; the documents not finished are done by the next run")
        return EXIT_TERMINATED
    log.info("done: %d documents (%d skipped, %d failed), %d pages done, %d failed", progress.documents_done
             + progress.documents_failed, progress.documents_skipped, progress.documents_failed,
             progress.pages_done, progress.pages_failed)
    return EXIT_DONE
