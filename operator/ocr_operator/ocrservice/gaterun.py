"""The quality gate, I/O half: send the golden pages straight to one pod, one page at a time.

A job (rollout.gate.Job) runs as one of the runtime's background jobs (runtime/jobs.py), so a
gate of many slow pages never holds a reconcile worker; when it ends, its result is kept and the
OcrService is woken. The reconcile reads the result, persists the verdict (status, quality
ConfigMap) and only then forgets it: an operator that stops in between loses a result no one
acted on, and the next one runs the job again. Requests are the ones clients send (POST /v1/ocr, JSON, the server's greedy decoding and
its own settings), with the gate's max_new_tokens and timeout_sec. With spec.auth every request carries
the OcrService's gate key (gatekey.py; Authorization: Bearer), which the pod takes only on these
requests to itself. Over TLS the pod's certificate
is not verified: it names the Service, not the pod's IP, and the pages and answers are no secret.
Golden pages on the model PVC (goldenPages.pvcPath) are listed by a pod of the new revision
(GET /v1/golden, `listing`) and each page's bytes fetched from it just before it is sent, checked
against the sha256 it listed: the operator mounts no volume. With shadow pages the GATE job arms the
serving pods before the golden pages and collects their copies' results after them (shadowrun.py).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import logging
import ssl
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp

from ocr_limits.quality import MAX_GOLDEN_BYTES
from ocr_limits.timestamps import iso
from ocr_operator.runtime.bounded import TooLarge, read_limited
from ocr_operator.runtime.jobs import Jobs
from ocr_operator.runtime.kube import ApiError, Kube
from ocr_operator.spec import OcrServiceSpec, Shadow

from . import naming, shadowrun
from .rollout import Observed, RolloutStatus
from .rollout.gate import GATE, Job, Result
from .rollout.model import PROGRESSING
from .rollout.outcomes import answer_outcome
from .rollout.pages import GoldenPages, Page, PagesProblem, pages_pod, read_listing, read_pages
from .rollout.verdict import Output

log = logging.getLogger(__name__)

Key = tuple[str, str]
# A pod that is busy (429) or not answering yet is asked again after this long, within the page's deadline.
RETRY_SECONDS = 1.0
# A golden pages listing (GET /v1/golden) read at most: names, hashes and expected texts.
MAX_LISTING_BYTES = 4 * 1024 * 1024
# A page's answer read at most (its text and usage): a pod's answers are read up to a bound, as
# every answer of an endpoint the operator does not control.
MAX_ANSWER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Target:
    """How to reach the server in a pod and what each request asks."""

    port: int
    https: bool
    max_new_tokens: int
    timeout_seconds: int
    key: str | None = None  # the gate key (gatekey.py) with spec.auth or shadow pages
    shadow: Shadow | None = None  # spec.rollout.qualityGate.shadow

    @classmethod
    def of(cls, spec: OcrServiceSpec, key: str | None = None) -> "Target | None":
        """The gate's tokens and deadline, at most the server's own (spec.inference), so a gate
        request is one a client may send; None without a gate."""
        gate = spec.rollout.quality_gate
        if gate is None:
            return None
        return cls(spec.service.port, bool(spec.tls_secret_name), min(gate.max_new_tokens, spec.inference.max_new_tokens),
                   min(gate.timeout_seconds, spec.inference.timeout_seconds), key, gate.shadow)


def retried(status: int, keyed: bool) -> bool:
    """Whether a page's refusal is asked again within its deadline: a busy pod (429, 503), and with
    a gate key a 401 (a key rotated by a restarted operator reaches the pods with kubelet's sync)."""
    return status in (429, 503) or (keyed and status == 401)


async def _page(session: aiohttp.ClientSession, url: str, body: dict, deadline: float,
                keyed: bool = False) -> tuple[str, int, str | None]:
    """One page's text, generated tokens and outcome (the worst of its pages'); RuntimeError when
    the pod refuses it or time runs out."""
    last = "no answer"
    while time.monotonic() < deadline:
        left = max(1.0, deadline - time.monotonic())
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=left)) as resp:
                if resp.status == 200:
                    answer = _answer(await _bounded(resp, MAX_ANSWER_BYTES))
                    return (str(answer.get("text") or ""), int((answer.get("usage") or {}).get("generated_tokens") or 0),
                            answer_outcome(answer.get("pages")))
                text = (await _head(resp, 300)).decode(errors="replace")
                if not retried(resp.status, keyed):
                    raise RuntimeError(f"HTTP {resp.status}: {text}")
                last = f"HTTP {resp.status}: {text}"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(RETRY_SECONDS)
    raise RuntimeError(f"no answer within the deadline ({last})")


def _url(target: Target, ip: str, path: str) -> str:
    host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod
    return f"{'https' if target.https else 'http'}://{host}:{target.port}{path}"


def _session(target: Target) -> aiohttp.ClientSession:
    context: ssl.SSLContext | bool = False if target.https else True
    headers = {"Authorization": f"Bearer {target.key}"} if target.key else None
    # trust_env False: a proxy of the operator's environment must not carry a request to a pod IP.
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context), trust_env=False, headers=headers)


async def _bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The response's body, at most `limit` bytes (RuntimeError beyond: the rest is not read)."""
    try:
        return await read_limited(resp.content, limit)
    except TooLarge as exc:
        raise RuntimeError(str(exc)) from None


async def _head(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The first `limit` bytes of an error answer (the rest is not read)."""
    data = b""
    while len(data) < limit:
        chunk = await resp.content.read(limit - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _answer(raw: bytes) -> dict[str, Any]:
    """A page's JSON answer; RuntimeError when it is not a JSON object."""
    try:
        answer = json.loads(raw)
    except ValueError:
        raise RuntimeError("the answer is not JSON") from None
    if not isinstance(answer, dict):
        raise RuntimeError("the answer is not a JSON object")
    return answer


async def listing(ip: str, target: Target) -> tuple[int, Any] | None:
    """The pod's GET /v1/golden: its status and JSON body (pages.read_listing reads them), or
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
    the model PVC are fetched first from the pod that listed them (pages.source). A GATE job with
    shadow pages and serving pods arms them first and collects their copies' results last."""
    started = time.monotonic()
    url = _url(target, job.ip, "/v1/ocr")
    outputs: list[Output] = []
    async with _session(target) as session:
        sample = None
        if job.kind == GATE and target.shadow is not None and job.serving:
            sample = shadowrun.Sample(session, lambda ip: _url(target, ip, shadowrun.PATH), target.shadow,
                                      job.attempt or job.revision)
            await sample.arm(job.serving, _url(target, job.ip, ""), target.timeout_seconds)
        try:
            for page in pages.pages:
                deadline = time.monotonic() + target.timeout_seconds + 10
                try:
                    data = page.data if pages.source is None else await _fetch(
                        session, _url(target, pages.source, f"/v1/golden/{quote(page.name, safe='')}"), page, deadline)
                    body = {"image": base64.b64encode(data).decode(), "max_new_tokens": target.max_new_tokens,
                            "timeout_sec": target.timeout_seconds}
                    text, tokens, outcome = await _page(session, url, body, deadline, bool(target.key))
                except RuntimeError as exc:
                    return Result(job, tuple(outputs), f"page {page.name}: {exc}", time.monotonic() - started)
                outputs.append(Output.of(page.name, text, tokens, outcome))
            golden = time.monotonic() - started  # status.qualityGate.seconds; the shadow pages have their own
            if sample is None:
                return Result(job, tuple(outputs), None, golden)
            await sample.poll()
            return Result(job, tuple(outputs), None, golden, await sample.finish())
        finally:
            if sample is not None and not sample.done:
                await sample.abandon()


def ensure(jobs: Jobs, key: Key, job: Job | None, pages: GoldenPages | None, target: Target | None) -> None:
    """Run `job` for OcrService `key` as a background job, unless it runs already or its result
    waits; any other job of `key` is cancelled (the spec moved on). `job` None: cancel whatever runs."""
    if job is None or pages is None or target is None:
        jobs.ensure(key, None)
        return

    async def send() -> Result:
        log.info("%s/%s: quality gate: %s job on pod %s (revision %s), %d pages", *key, job.kind, job.pod,
                 job.revision, len(pages.pages))
        result = await run(job, pages, target)
        log.info("%s/%s: quality gate: %s job on pod %s ended in %.1fs%s%s", *key, job.kind, job.pod, result.seconds,
                 f": {result.error}" if result.error else "",
                 f"; shadow pages: {len(result.shadow.pages)} from {len(result.shadow.armed)} pods in "
                 f"{result.shadow.seconds:.1f}s" if result.shadow is not None else "")
        return result

    jobs.ensure(key, job.key, send, on_error=lambda exc: Result(job, (), f"{type(exc).__name__}: {exc}"))


async def golden_pages(kube: Kube, namespace: str, spec: OcrServiceSpec, desired_revision: str, prior: RolloutStatus,
                       observed: Observed, key: str | None = None) -> GoldenPages | PagesProblem | None:
    """The golden pages, read (one GET) only while the gate may need them: a new revision to
    roll out, a rollout in progress, or a pod held back by the readiness gate. None otherwise.
    From a ConfigMap, or (goldenPages.pvcPath) as a pod of the desired revision lists them: the
    operator mounts no PVC, the pod has the model volume and serves the folder read-only."""
    gate, target = spec.rollout.quality_gate, Target.of(spec, key)
    if gate is None or target is None:
        return None
    settled = desired_revision == prior.current_revision and prior.phase != PROGRESSING
    refused = desired_revision == prior.failed_revision and prior.phase != PROGRESSING  # not retried
    if (settled or refused) and not any(p.awaiting_gate and not p.deleting for p in observed.pods):
        return None
    settings = f"maxNewTokens={target.max_new_tokens}"
    if gate.pvc_path is not None:  # listed by a pod of the revision (GOLDEN_DIR): none up yet, None
        pod = pages_pod(observed.pods, desired_revision)
        answer = await listing(pod.ip, target) if pod is not None and pod.ip else None
        return None if answer is None else read_listing(*answer, gate.pvc_path, pod.name, pod.ip, settings=settings)
    return read_pages(await kube.get("ConfigMap", namespace, gate.config_map), gate.config_map, settings=settings)


async def admit(kube: Kube, namespace: str, pods: tuple[str, ...], now: dt.datetime) -> None:
    """Set the readiness-gate condition True on `pods` (a strategic merge patch of their
    status: the kubelet's conditions stay). A pod gone meanwhile is no error."""
    for pod in pods:
        patch = {"status": {"conditions": [{
            "type": naming.GATE_CONDITION, "status": "True", "reason": "QualityGatePassed",
            "message": "the quality gate passed this pod's revision", "lastTransitionTime": iso(now)}]}}
        try:
            await kube.strategic_patch("Pod", namespace, pod, patch, subresource="status")
        except ApiError as exc:
            if exc.status != 404:
                raise
