"""Shadow pages, I/O half (spec.rollout.qualityGate.shadow): the GATE job arms the serving pods,
waits for their copies to be judged, and disarms them for the final results (rollout/shadow.py
judges them).

Before the golden pages are sent, every Ready pod of the last good revision (Job.serving) is armed
with PUT /v1/shadow: its copies go to the held pod's URL, the gate attempt is the arm's id. After
the golden pages the job asks each armed pod (GET /v1/shadow) every POLL_SECONDS until the pages
judged reach maxPages, maxSeconds have passed since the arming, or no pod has anything more to
send; then DELETE /v1/shadow disarms each and answers its final results. Every request carries the
gate key (the session's Authorization: Bearer) and is addressed to the pod's IP (the Host aiohttp
sends), the only requests a server takes it on. A serving pod's answers are read up to a bound; a
pod that refuses or does not answer is recorded (ShadowResult.errors), never a crash: the golden
pages still decide. A job that ends early (the golden pages failed, or it was cancelled) disarms
what it armed; the server also disarms by itself at maxSeconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp

from ocr_operator.runtime.bounded import TooLarge, read_limited
from ocr_operator.spec import Shadow

from .rollout.shadow import ShadowResult, merge, read_answer

log = logging.getLogger(__name__)

PATH = "/v1/shadow"
POLL_SECONDS = 2.0
CALL_SECONDS = 10.0  # one PUT, GET or DELETE
# A serving pod's shadow answer read at most: MAX_SHADOW_PAGES records of hashes and numbers.
MAX_ANSWER_BYTES = 1024 * 1024


async def _call(session: aiohttp.ClientSession, method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    """One shadow request's JSON answer; RuntimeError naming the request when it is refused,
    unanswered, over the bound, or not JSON."""
    try:
        async with session.request(method, url, json=body, timeout=aiohttp.ClientTimeout(total=CALL_SECONDS)) as resp:
            raw = await read_limited(resp.content, MAX_ANSWER_BYTES)
            if resp.status != 200:
                raise RuntimeError(f"{method} {PATH}: HTTP {resp.status}: {raw[:300].decode(errors='replace')}")
    except TooLarge as exc:
        raise RuntimeError(f"{method} {PATH}: {exc}") from None
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise RuntimeError(f"{method} {PATH}: {type(exc).__name__}: {exc}") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise RuntimeError(f"{method} {PATH}: the answer is not JSON") from None


class Sample:
    """The shadow pages of one gate run: the serving pods armed, and what went wrong on the way."""

    def __init__(self, session: aiohttp.ClientSession, url: Callable[[str], str], shadow: Shadow, attempt: str) -> None:
        self.session, self.url, self.shadow, self.attempt = session, url, shadow, attempt
        self.started = time.monotonic()
        self.armed: list[str] = []  # pod names, in order
        self.ips: dict[str, str] = {}
        self.errors: list[str] = []
        self.last: dict[str, Any] = {}  # each pod's last GET answer
        self.done = False

    async def arm(self, serving: tuple[tuple[str, str], ...], target: str, timeout_seconds: int) -> None:
        """PUT /v1/shadow on every serving pod, at once; a pod that refuses is an error."""
        body = {"id": self.attempt, "target": target, "samplePercent": self.shadow.sample_percent,
                "maxPages": self.shadow.max_pages, "maxSeconds": self.shadow.max_seconds,
                "noisePages": self.shadow.noise_pages, "timeoutSeconds": timeout_seconds}
        self.started = time.monotonic()
        answers = await asyncio.gather(*(self._try(pod, ip, "PUT", body) for pod, ip in serving))
        for (pod, ip), ok in zip(serving, answers):
            if ok is not None:
                self.armed.append(pod)
                self.ips[pod] = ip

    async def _try(self, pod: str, ip: str, method: str, body: dict[str, Any] | None = None) -> Any:
        """The answer, or None with the error recorded."""
        try:
            return await _call(self.session, method, self.url(ip), body)
        except RuntimeError as exc:
            self.errors.append(f"pod {pod}: {exc}")
            return None

    def _judged(self) -> int:
        return sum(1 for a in self.last.values() for p in (a.get("pages") or []) if isinstance(p, dict)
                   and p.get("error") is None and p.get("distance") is not None)

    def _idle(self) -> bool:
        """Whether no pod has anything more to send: each disarmed (maxPages copies sent, or its
        maxSeconds) with nothing pending."""
        return len(self.last) == len(self.armed) and all(
            not a.get("armed") and not a.get("pending") for a in self.last.values())

    async def poll(self) -> None:
        """GET each armed pod every POLL_SECONDS until maxPages are judged, maxSeconds have passed
        since the arming, or no pod has more to send. A GET that fails is asked again."""
        deadline = self.started + self.shadow.max_seconds
        while self.armed and time.monotonic() < deadline:
            answers = await asyncio.gather(*(self._get(pod) for pod in self.armed))
            for pod, answer in zip(self.armed, answers):
                if isinstance(answer, dict):
                    self.last[pod] = answer
            if self._judged() >= self.shadow.max_pages or self._idle():
                return
            await asyncio.sleep(max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))

    async def _get(self, pod: str) -> Any:
        try:
            return await _call(self.session, "GET", self.url(self.ips[pod]))
        except RuntimeError as exc:
            log.info("shadow pages: pod %s: %s (asked again)", pod, exc)
            return None

    async def finish(self) -> ShadowResult:
        """DELETE /v1/shadow on each armed pod: their final results, as one sample. A pod whose
        DELETE fails gives its last GET answer (its arm ends at maxSeconds by itself)."""
        self.done = True
        answers = await asyncio.gather(*(self._try(pod, self.ips[pod], "DELETE") for pod in self.armed))
        results = []
        for pod, answer in zip(self.armed, answers):
            answer = answer if answer is not None else self.last.get(pod)
            if answer is None:
                continue
            if isinstance(answer, dict) and answer.get("id") not in (None, self.attempt):
                self.errors.append(f"pod {pod}: its shadow pages are another gate's (id {str(answer.get('id'))[:64]})")
                continue
            results.append(read_answer(pod, answer))
        merged = merge([*results, ShadowResult(errors=tuple(self.errors))], time.monotonic() - self.started)
        return replace(merged, armed=tuple(self.armed))

    async def abandon(self) -> None:
        """Disarm what was armed, results unread (the golden pages failed, or the job was cancelled)."""
        self.done = True
        answers = await asyncio.gather(*(_call(self.session, "DELETE", self.url(self.ips[pod])) for pod in self.armed),
                                       return_exceptions=True)
        for pod, answer in zip(self.armed, answers):
            if isinstance(answer, Exception):
                log.info("shadow pages: pod %s: %s (it disarms itself at maxSeconds)", pod, answer)
