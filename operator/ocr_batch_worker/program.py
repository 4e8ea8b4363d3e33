"""`python -m ocr_batch_worker`: start one index's worker and map how it ended to an exit status.

The exit statuses are the contract with the Job's podFailurePolicy (contract.py): EXIT_DONE when
every owned document has an outcome (failed documents included: they are in the errors files),
EXIT_FATAL only for what every retry would meet again (configuration, the input unlistable,
credentials refused, the output unwritable), EXIT_STORAGE when the storage stayed unavailable
past spec.limits.storageRetrySeconds (the Job retries the index), EXIT_TERMINATED on SIGTERM.
Anything else (a bug, a crash) exits 1, which the Job retries like any failed pod.

Every log line is one line: a document's name or a reason holding a newline is escaped (logs.py),
so nothing a document is called can forge the progress lines the operator reads from the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from ocr_limits import split_keys

from .client import OcrClient
from .config import ConfigError, WorkerConfig, load
from .contract import (EXIT_DONE, EXIT_FATAL, EXIT_STORAGE, EXIT_TERMINATED, INDEX_ENV, INVALID_CONFIGURATION,
                       TERMINATION_LOG)
from .failures import FatalError
from .logs import setup_logging
from .patience import Outage, PatientStore, StorageUnavailable
from .progress import Progress
from .storage import StoreError, open_store
from .worker import Worker

log = logging.getLogger("ocr_batch_worker")


def write_termination_message(progress: Progress, path: str) -> None:
    """The last report as the container's termination message (Kubernetes keeps it in the pod's
    status, at most 4096 bytes), where the operator reads a finished index's counts; skipped
    outside a pod, where the file does not exist."""
    if os.path.exists(path):
        with contextlib.suppress(OSError), open(path, "wb") as f:
            f.write(progress.to_json()[:4096])


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
    try:  # nothing is read yet: what fails here is the configuration (a malformed S3 endpoint or
        # credential value, an API keys file without a key), and the operator reads it from the
        # termination message like any other fatal end
        source, sink, api_key = open_store(cfg.input, "input"), open_store(cfg.output, "output"), _api_key(cfg)
    except (ConfigError, StoreError) as exc:
        ended = Progress(cfg.index, cfg.shards, fatal=str(exc), fatal_reason=INVALID_CONFIGURATION)
        write_termination_message(ended, os.environ.get("TERMINATION_LOG", TERMINATION_LOG))
        raise
    client = OcrClient(cfg.service_url, concurrency=cfg.concurrency, timeout=cfg.request_timeout,
                       api_key=api_key, ca_file=cfg.ca_file, server_name=cfg.server_name)
    outage = Outage(cfg.storage_retry_seconds)
    worker = None
    try:
        worker = Worker(cfg, PatientStore(source, outage, role="input"), PatientStore(sink, outage, role="output"),
                        client.send, outage=outage)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await worker.run()
        except asyncio.CancelledError:
            outage.stop()  # no more waiting on the storage: the grace period is short
            await worker.release()
            with contextlib.suppress(FatalError, StorageUnavailable):
                await worker.report(force=True)
            raise
    finally:
        await client.close()
        if worker is not None:
            write_termination_message(worker.progress, os.environ.get("TERMINATION_LOG", TERMINATION_LOG))


def main() -> int:
    setup_logging()
    try:
        cfg = load()
    except ConfigError as exc:
        log.error("invalid configuration: %s", exc)
        index = os.environ.get(INDEX_ENV, "0")  # the Job's own value; its check failing is the error
        ended = Progress(int(index) if index.isdigit() and len(index) <= 6 else 0, 0, fatal=str(exc),
                         fatal_reason=INVALID_CONFIGURATION)
        write_termination_message(ended, os.environ.get("TERMINATION_LOG", TERMINATION_LOG))
        return EXIT_FATAL
    try:
        progress = asyncio.run(serve(cfg))
    except (FatalError, ConfigError, StoreError) as exc:
        log.error("stopped: %s", exc)
        return EXIT_FATAL
    except StorageUnavailable as exc:
        log.error("stopped: %s; the Job runs this index again", exc)
        return EXIT_STORAGE
    except asyncio.CancelledError:
        log.warning("stopped by SIGTERM; the documents not finished are done by the next run")
        return EXIT_TERMINATED
    log.info("done: %d documents (%d skipped, %d failed), %d pages done, %d failed", progress.documents_done
             + progress.documents_failed, progress.documents_skipped, progress.documents_failed,
             progress.pages_done, progress.pages_failed)
    return EXIT_DONE
