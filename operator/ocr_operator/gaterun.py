"""The quality gate, I/O half: send the golden pages straight to one pod, one page at a time.

A job (quality.Job) runs as a task beside the reconciles, so a gate of many slow pages never holds
a reconcile worker; when it ends, its result is kept and the OcrService is woken. The reconcile
reads the result, persists the verdict (status, quality ConfigMap) and only then forgets it: an
operator that stops in between loses a result no one acted on, and the next one runs the job
again. Requests are the ones clients send (POST /v1/ocr, JSON, the server's greedy decoding and
its own settings), with the gate's max_new_tokens and timeout_sec. Over TLS the pod's certificate
is not verified: it names the Service, not the pod's IP, and the pages and answers are no secret.
Golden pages on the model PVC (goldenPages.pvcPath) are listed by a pod of the new revision
(GET /v1/golden, `listing`) and each page's bytes fetched from it just before it is sent, checked
against the sha256 it listed: the operator mounts no volume.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from ocr_limits.quality import MAX_GOLDEN_BYTES

from .quality import GoldenPages, Job, Output, Page, Result

log = logging.getLogger(__name__)

Key = tuple[str, str]
# A pod that is busy (429) or not answering yet is asked again after this long, within the page's deadline.
RETRY_SECONDS = 1.0
# A golden pages listing (GET /v1/golden) read at most: names, hashes and expected texts.
MAX_LISTING_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    """How to reach the server in a pod and what each request asks."""

    port: int
    https: bool
    max_new_tokens: int
    timeout_seconds: int


async def _page(session: aiohttp.ClientSession, url: str, body: dict, deadline: float) -> tuple[str, int]:
    """One page's text and generated tokens; RuntimeError when the pod refuses it or time runs out."""
    last = "no answer"
    while time.monotonic() < deadline:
        left = max(1.0, deadline - time.monotonic())
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=left)) as resp:
                if resp.status == 200:
                    answer = await resp.json()
                    return str(answer.get("text") or ""), int((answer.get("usage") or {}).get("generated_tokens") or 0)
                text = (await resp.text())[:300]
                if resp.status not in (429, 503):
                    raise RuntimeError(f"HTTP {resp.status}: {text}")
                last = f"HTTP {resp.status}: {text}"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(RETRY_SECONDS)
    raise RuntimeError(f"no answer within the deadline ({last})")


def _url(target: Target, ip: str, path: str) -> str:
    return f"{'https' if target.https else 'http'}://{ip}:{target.port}{path}"


def _session(target: Target) -> aiohttp.ClientSession:
    context: ssl.SSLContext | bool = False if target.https else True
    # trust_env False: a proxy of the operator's environment must not carry a request to a pod IP.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context), trust_env=False)


async def _bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The response's body, at most `limit` bytes (RuntimeError beyond)."""
    data = await resp.content.read(limit + 1)
    if len(data) > limit:
        raise RuntimeError(f"more than {limit} bytes")
    return data


async def listing(ip: str, target: Target) -> tuple[int, Any] | None:
    """The pod's GET /v1/golden: its status and JSON body (quality.read_listing reads them), or
    None when the pod does not answer (asked again at the next reconcile)."""
    try:
        async with _session(target) as session:
            async with session.get(_url(target, ip, "/v1/golden"), timeout=aiohttp.ClientTimeout(total=30)) as resp:
                raw = await _bounded(resp, MAX_LISTING_BYTES)
                try:
                    return resp.status, json.loads(raw or b"null")
                except ValueError:
                    return resp.status, None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, RuntimeError) as exc:
        log.info("golden pages listing from %s: %s: %s", ip, type(exc).__name__, exc)
        return None


async def _fetch(session: aiohttp.ClientSession, url: str, page: Page, deadline: float) -> bytes:
    """A listed page's bytes from the pod that listed it; RuntimeError unless they are the bytes listed."""
    left = max(1.0, deadline - time.monotonic())
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=left)) as resp:
            data = await _bounded(resp, MAX_GOLDEN_BYTES)
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status} fetching it: {data[:300].decode(errors='replace')}")
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise RuntimeError(f"fetching it: {type(exc).__name__}: {exc}") from None
    if hashlib.sha256(data).hexdigest() != page.sha256:
        raise RuntimeError("its bytes changed on the model PVC since they were listed")
    return data


async def run(job: Job, pages: GoldenPages, target: Target) -> Result:
    """Send every page of `pages` to the pod of `job`; the outputs, or the first error. Pages on
    the model PVC are fetched first from the pod that listed them (pages.source)."""
    started = time.monotonic()
    url = _url(target, job.ip, "/v1/ocr")
    outputs: list[Output] = []
    async with _session(target) as session:
        for page in pages.pages:
            deadline = time.monotonic() + target.timeout_seconds + 10
            try:
                data = page.data if pages.source is None else await _fetch(
                    session, _url(target, pages.source, f"/v1/golden/{quote(page.name, safe='')}"), page, deadline)
                body = {"image": base64.b64encode(data).decode(), "max_new_tokens": target.max_new_tokens,
                        "timeout_sec": target.timeout_seconds}
                text, tokens = await _page(session, url, body, deadline)
            except RuntimeError as exc:
                return Result(job, tuple(outputs), f"page {page.name}: {exc}", time.monotonic() - started)
            outputs.append(Output.of(page.name, text, tokens))
    return Result(job, tuple(outputs), None, time.monotonic() - started)


class GateRunner:
    """One job at a time per OcrService; `wake` is called with its key when a job ends."""

    def __init__(self, wake: Callable[[Key], None]) -> None:
        self.wake = wake
        self.running: dict[Key, tuple[Job, asyncio.Task]] = {}
        self.results: dict[Key, Result] = {}

    def result(self, key: Key) -> Result | None:
        return self.results.get(key)

    def forget(self, key: Key, result: Result) -> None:
        """The reconcile persisted what `result` decided."""
        if self.results.get(key) is result:
            del self.results[key]

    def ensure(self, key: Key, job: Job | None, pages: GoldenPages | None, target: Target | None) -> None:
        """Run `job` for `key` unless it runs already or its result waits; any other job of
        `key` is cancelled (the spec moved on). `job` None: cancel whatever runs."""
        current = self.running.get(key)
        if current is not None and (job is None or current[0].key != job.key):
            current[1].cancel()
            del self.running[key]
            current = None
        waiting = self.results.get(key)
        if job is None or pages is None or target is None or current is not None \
                or (waiting is not None and waiting.job.key == job.key):
            return
        log.info("%s/%s: quality gate: %s job on pod %s (revision %s), %d pages", *key, job.kind, job.pod,
                 job.revision, len(pages.pages))
        task = asyncio.get_running_loop().create_task(self._run(key, job, pages, target),
                                                      name=f"quality-gate-{key[0]}-{key[1]}")
        self.running[key] = (job, task)

    async def _run(self, key: Key, job: Job, pages: GoldenPages, target: Target) -> None:
        try:
            result = await run(job, pages, target)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug must not leave the gate waiting forever
            log.exception("%s/%s: quality gate job failed", *key)
            result = Result(job, (), f"{type(exc).__name__}: {exc}")
        if self.running.get(key, (None,))[0] is job:
            del self.running[key]
        self.results[key] = result
        log.info("%s/%s: quality gate: %s job on pod %s ended in %.1fs%s", *key, job.kind, job.pod, result.seconds,
                 f": {result.error}" if result.error else "")
        self.wake(key)

    def drop(self, key: Key) -> None:
        """The OcrService is gone."""
        current = self.running.pop(key, None)
        if current is not None:
            current[1].cancel()
        self.results.pop(key, None)

    async def stop(self) -> None:
        tasks = [task for _, task in self.running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.running.clear()
