"""Shadow pages (spec.rollout.qualityGate.shadow): a serving pod copies a sample of its live
/v1/ocr requests to a new revision's held pod, after its own answer is sent, and records how far
the held pod's answer is from its own.

The quality gate arms a serving pod (PUT /v1/shadow, http/shadow_routes.py) with the held pod's
address. While armed, each POST /v1/ocr answer is considered (`decide`, before the answer is sent:
no bytes copied, no I/O): a 200, not streamed, whose request did not ask for no retention
(`Cache-Control: no-store`, `X-OCR-Retention: none`), not sent with the gate's key and not itself a
shadow copy, is drawn with probability samplePercent/100. A drawn one is queued after the answer is
sent (a background task of the response), in a bounded queue (MAX_SHADOW_QUEUE_PAGES and
MAX_SHADOW_QUEUE_BYTES; full: dropped, counted). One worker sends the copies one at a time to the
held pod, with the gate's key and `X-OCR-Shadow: copy`; for the first noisePages copies it also
generates the same page again on this pod (the result cache bypassed): the distance between two
answers of the same revision is the gate's noise floor.

Pages live only in memory and only until their copy is recorded; a record holds hashes, distances
(ocr_limits.quality.page_distance, the golden pages' distance), outcomes and seconds, never a text.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.client
import ipaddress
import json
import logging
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ocr_limits.quality import (
    DEFAULT_GATE_TIMEOUT_SECONDS,
    DEFAULT_SHADOW_MAX_PAGES,
    DEFAULT_SHADOW_NOISE_PAGES,
    DEFAULT_SHADOW_SAMPLE_PERCENT,
    DEFAULT_SHADOW_SECONDS,
    MAX_GATE_TIMEOUT_SECONDS,
    MAX_SHADOW_NOISE_PAGES,
    MAX_SHADOW_PAGES,
    MAX_SHADOW_QUEUE_BYTES,
    MAX_SHADOW_QUEUE_PAGES,
    MAX_SHADOW_SECONDS,
    MIN_SHADOW_SECONDS,
    bounded_text,
    page_distance,
)

from ..runtime.metrics import Metrics
from .outcome import worst
from .schema import OcrOptions, OcrResponse

log = logging.getLogger("ocr_server.shadow")

COPY_HEADER, COPY_VALUE = "x-ocr-shadow", "copy"  # every copy carries it; a copy is never copied again
RETENTION_HEADER = "x-ocr-retention"
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # a held pod's answer, read at most
RETRY_STATUSES = (429, 503)  # the held pod is busy: asked again after RETRY_AFTER_S, within timeoutSeconds
RETRY_AFTER_S = 1.0
# `decide`'s answers: copied, or why not (the skipped counts; notDrawn: not in the sample).
SAMPLED, NOT_OK, STREAM, NO_RETENTION, NOT_DRAWN = "sampled", "notOk", "stream", "noRetention", "notDrawn"
SKIPPED = ("noRetention", "stream", "notOk", "queueFull", "tooLarge")


def check_target(url: str) -> str:
    """The held pod's base URL, `http(s)://<IP literal>:<port>` and nothing else (no name, path,
    user, query or fragment), written back in one form; ValueError saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError("the scheme must be http or https")
    if "@" in parts.netloc or parts.path or parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("only scheme://address:port: no user, path, query or fragment")
    host = parts.hostname or ""
    if "%" in host:
        raise ValueError("an IPv6 zone is no pod address")
    try:
        address = ipaddress.ip_address(host)
        port = parts.port
    except ValueError:
        raise ValueError("the host must be an IP literal (v4, or v6 in brackets) and the port a number") from None
    if port is None or port == 0:
        raise ValueError("the port is required")
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"{parts.scheme}://{shown}:{port}"


class ShadowArm(BaseModel):
    """PUT /v1/shadow's body: the gate attempt's id, the held pod and the sample's bounds."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: str = Field(min_length=1, max_length=128)
    target: str = Field(max_length=256, description="the held pod: http(s)://<IP literal>:<port>")
    sample_percent: int = Field(DEFAULT_SHADOW_SAMPLE_PERCENT, ge=1, le=100, alias="samplePercent")
    max_pages: int = Field(DEFAULT_SHADOW_MAX_PAGES, ge=1, le=MAX_SHADOW_PAGES, alias="maxPages")
    max_seconds: int = Field(DEFAULT_SHADOW_SECONDS, ge=MIN_SHADOW_SECONDS, le=MAX_SHADOW_SECONDS, alias="maxSeconds")
    noise_pages: int = Field(DEFAULT_SHADOW_NOISE_PAGES, ge=0, le=MAX_SHADOW_NOISE_PAGES, alias="noisePages")
    timeout_seconds: int = Field(DEFAULT_GATE_TIMEOUT_SECONDS, ge=1, le=MAX_GATE_TIMEOUT_SECONDS, alias="timeoutSeconds")

    @field_validator("target")
    @classmethod
    def _target(cls, value: str) -> str:
        return check_target(value)


def no_retention(headers: Mapping[str, str]) -> bool:
    """Whether the request asked that nothing of it be kept: `Cache-Control: no-store` or
    `X-OCR-Retention: none` (header names lower case, as Starlette's Headers take them)."""
    directives = {d.split("=", 1)[0].strip().lower() for d in headers.get("cache-control", "").split(",")}
    return "no-store" in directives or headers.get(RETENTION_HEADER, "").strip().lower() == "none"


def is_copy(headers: Mapping[str, str]) -> bool:
    return headers.get(COPY_HEADER, "").strip().lower() == COPY_VALUE


def decide(percent: int, headers: Mapping[str, str], *, gate: bool, stream: bool, status: int,
           draw: float) -> str | None:
    """What becomes of one /v1/ocr answer while armed: None (not considered: the gate's own page, or
    a shadow copy), SAMPLED, or why not. `draw`: uniform in [0, 1). Pure."""
    if gate or is_copy(headers):
        return None
    if status != 200:
        return NOT_OK
    if stream:
        return STREAM
    if no_retention(headers):
        return NO_RETENTION
    return SAMPLED if draw * 100 < percent else NOT_DRAWN


@dataclass
class Copy:
    """A sampled request and the serving pod's answer to it, until its copy is recorded."""

    data: bytes
    opts: OcrOptions
    text: str
    outcome: str

    @classmethod
    def of(cls, data: bytes, opts: OcrOptions, answer: OcrResponse) -> "Copy":
        return cls(data, opts, answer.text, worst(p.outcome for p in answer.pages))


@dataclass
class Answer:
    """The held pod's answer to a copy: its status and body, or why there is none."""

    status: int | None = None
    body: bytes = b""
    error: str | None = None


class CopyPost:
    """One POST of a copy to the held pod, run on a worker thread (http.client: the standard
    library); `abort` from the event loop ends it at once (the shadow disarmed)."""

    def __init__(self, target: str, key: str, body: Callable[[], bytes], timeout: float) -> None:
        self.target, self.key, self.body, self.timeout = target, key, body, timeout
        self.conn: http.client.HTTPConnection | None = None
        self.aborted = False

    def run(self) -> Answer:
        if self.aborted:
            return Answer(error="disarmed")
        parts = urlsplit(self.target)
        if parts.scheme == "https":  # the pod's certificate names the Service, not the pod's IP
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            self.conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=self.timeout, context=context)
        else:
            self.conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout)
        try:
            self.conn.request("POST", "/v1/ocr", body=self.body(), headers={
                "Authorization": f"Bearer {self.key}", "Content-Type": "application/json", "X-OCR-Shadow": COPY_VALUE})
            answer = self.conn.getresponse()
            body = answer.read(MAX_ANSWER_BYTES + 1)
            if len(body) > MAX_ANSWER_BYTES:
                return Answer(error="invalid answer: larger than 4 MiB")
            return Answer(answer.status, body)
        except TimeoutError:
            return Answer(error="timeout")
        except (OSError, http.client.HTTPException) as exc:
            log.info("shadow copy to %s: %s", self.target, exc)
            return Answer(error="connection")
        finally:
            self.conn.close()

    def abort(self) -> None:
        self.aborted = True
        sock = self.conn.sock if self.conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def judge(copy: Copy, sha: str, answer: Answer, seconds: float) -> dict[str, Any]:
    """One copy's record: hashes, distance, outcomes, seconds; never a text. `error`: timeout,
    connection, or an invalid answer (then unjudged: distance None). Pure."""
    record: dict[str, Any] = {
        "sha256": sha, "servingSha256": hashlib.sha256(bounded_text(copy.text).encode()).hexdigest(),
        "candidateSha256": None, "distance": None, "status": None, "servingOutcome": copy.outcome,
        "candidateOutcome": None, "seconds": round(seconds, 3), "error": answer.error}
    if answer.error is not None:
        return record
    if answer.status != 200:
        return {**record, "distance": 1.0, "status": answer.status}
    try:
        body = json.loads(answer.body)
        text = str(body["text"])
        outcome = worst(str(p["outcome"]) for p in body.get("pages") or () if p.get("outcome"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return {**record, "error": "invalid answer: no OCR response"}
    return {**record, "candidateSha256": hashlib.sha256(bounded_text(text).encode()).hexdigest(),
            "distance": page_distance(copy.text, text), "candidateOutcome": outcome}


@dataclass
class _Run:
    """One arm: its settings, counts, queue and records."""

    arm: ShadowArm
    key: str
    until: float
    seen: int = 0
    sampled: int = 0
    reserved: int = 0  # drawn and not dropped: at most maxPages
    skipped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SKIPPED, 0))
    queue: deque[Copy] = field(default_factory=deque)
    queued_bytes: int = 0
    in_flight: bool = False
    noise_tried: int = 0
    pages: list[dict[str, Any]] = field(default_factory=list)
    noise: list[dict[str, Any]] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    worker: asyncio.Task | None = None


Replay = Callable[[bytes, OcrOptions], Awaitable[OcrResponse]]


class Shadow:
    """A serving pod's shadow pages: at most one arm at a time, on the event loop (no lock)."""

    def __init__(self, replay: Replay, metrics: Metrics, clock: Callable[[], float] = time.monotonic,
                 draw: Callable[[], float] = random.random) -> None:
        self.replay, self.metrics, self.clock, self.draw = replay, metrics, clock, draw
        self._run: _Run | None = None

    # ---------- the gate's side (PUT, GET, DELETE /v1/shadow) ----------
    async def arm(self, arm: ShadowArm, key: str) -> dict[str, Any]:
        """Arm (any earlier arm and its records are dropped); `key` goes with every copy."""
        await self._stop()
        run = self._run = _Run(arm, key, self.clock() + arm.max_seconds)
        run.worker = asyncio.create_task(self._work(run), name="shadow-copies")
        return self.report()

    def report(self) -> dict[str, Any]:
        run = self._run
        if run is None:
            return {"id": None, "armed": False, "target": None, "secondsLeft": 0.0, "seen": 0, "sampled": 0,
                    "skipped": dict.fromkeys(SKIPPED, 0), "pending": 0, "pages": [], "noise": []}
        return {"id": run.arm.id, "armed": self._open(run), "target": run.arm.target,
                "secondsLeft": round(max(run.until - self.clock(), 0.0), 3), "seen": run.seen,
                "sampled": run.sampled, "skipped": dict(run.skipped), "pending": len(run.queue) + run.in_flight,
                "pages": list(run.pages), "noise": list(run.noise)}

    async def disarm(self) -> dict[str, Any]:
        """Stop: the queue dropped, the copy in flight cancelled; the final report, then forgotten."""
        await self._stop()
        final = self.report()
        self._run = None
        return {**final, "armed": False, "secondsLeft": 0.0}

    async def close(self) -> None:
        await self._stop()

    # ---------- the request path ----------
    def consider(self, headers: Mapping[str, str], *, gate: bool, stream: bool, status: int) -> object | None:
        """Before an answer is sent: whether to copy it, as the ticket `enqueue` takes (a place in
        the sample is held for it), or None. Counts it; does nothing else."""
        run = self._run
        if run is None or not self._open(run):
            return None
        decision = decide(run.arm.sample_percent, headers, gate=gate, stream=stream, status=status, draw=self.draw())
        if decision is None:
            return None
        run.seen += 1
        self.metrics.shadow_copies.labels(decision).inc()
        if decision != SAMPLED:
            if decision in run.skipped:
                run.skipped[decision] += 1
            return None
        run.sampled += 1
        run.reserved += 1
        return run

    async def enqueue(self, ticket: object, data: bytes, opts: OcrOptions, answer: OcrResponse) -> None:
        """After the answer is sent (the response's background task): queue the copy, or drop it.
        A ticket of an arm since replaced or disarmed is dropped silently."""
        run = self._run
        if run is None or ticket is not run:
            return
        reason = None
        if len(data) > MAX_SHADOW_QUEUE_BYTES:
            reason = "tooLarge"
        elif len(run.queue) >= MAX_SHADOW_QUEUE_PAGES or run.queued_bytes + len(data) > MAX_SHADOW_QUEUE_BYTES:
            reason = "queueFull"
        if reason is not None or run.worker is None or run.worker.done():
            run.skipped[reason or "queueFull"] += 1
            run.reserved -= 1
            self.metrics.shadow_copies.labels("dropped").inc()
            return
        run.queue.append(Copy.of(data, opts, answer))
        run.queued_bytes += len(data)
        run.wake.set()

    def _open(self, run: _Run) -> bool:
        return run.reserved < run.arm.max_pages and self.clock() < run.until

    # ---------- the worker ----------
    async def _work(self, run: _Run) -> None:
        try:
            async with asyncio.timeout(max(run.until - self.clock(), 0.0)):  # disarmed by itself at maxSeconds
                while True:
                    if not run.queue:
                        run.wake.clear()
                        await run.wake.wait()
                        continue
                    copy = run.queue.popleft()
                    run.queued_bytes -= len(copy.data)
                    run.in_flight = True
                    await self._one(run, copy)
                    run.in_flight = False
        except TimeoutError:
            pass
        finally:
            self._drop(run)

    def _drop(self, run: _Run) -> None:
        left = len(run.queue) + run.in_flight
        if left:
            self.metrics.shadow_copies.labels("dropped").inc(left)
        run.queue.clear()
        run.queued_bytes, run.in_flight = 0, False

    async def _stop(self) -> None:
        run = self._run
        if run is not None and run.worker is not None and not run.worker.done():
            run.worker.cancel()
            try:
                await run.worker
            except asyncio.CancelledError:
                pass

    async def _one(self, run: _Run, copy: Copy) -> None:
        arm = run.arm
        sha = await asyncio.to_thread(lambda: hashlib.sha256(copy.data).hexdigest())  # a large page: off the loop
        timeout = min(copy.opts.timeout_sec or arm.timeout_seconds, arm.timeout_seconds)
        options = copy.opts.model_dump(exclude_none=True, exclude={"stream", "timeout_sec"})

        def body() -> bytes:  # on the worker thread: base64 and JSON of a large page stay off the event loop
            return json.dumps({"image": base64.b64encode(copy.data).decode(), **options, "timeout_sec": timeout}).encode()

        t0 = self.clock()
        deadline = t0 + timeout
        while True:
            post = CopyPost(arm.target, run.key, body, max(deadline - self.clock(), 0.1))
            try:
                answer = await asyncio.to_thread(post.run)
            except asyncio.CancelledError:  # disarmed: the thread's connection is closed, not waited for
                post.abort()
                raise
            if answer.status not in RETRY_STATUSES or self.clock() + RETRY_AFTER_S >= deadline:
                break
            await asyncio.sleep(RETRY_AFTER_S)
        record = await asyncio.to_thread(judge, copy, sha, answer, self.clock() - t0)  # JSON of up to 4 MiB
        run.pages.append(record)
        self.metrics.shadow_copies.labels("error" if record["distance"] is None else "judged").inc()
        if run.noise_tried < arm.noise_pages:
            run.noise_tried += 1
            await self._noise(run, copy, sha, timeout)

    async def _noise(self, run: _Run, copy: Copy, sha: str, timeout: float) -> None:
        """The same page again on this pod (its result cache bypassed): how far two answers of the
        serving revision are apart. A replay that fails is logged and left out."""
        opts = copy.opts.model_copy(update={"stream": False, "timeout_sec": timeout})
        try:
            again = await self.replay(copy.data, opts)
        except Exception as exc:  # noqa: BLE001 - a busy or failing replay leaves no noise record, never a crash
            log.warning("shadow noise replay failed: %s", exc)
            return
        run.noise.append({"sha256": sha, "distance": page_distance(copy.text, again.text)})
