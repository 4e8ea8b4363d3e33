"""The completion webhook: one signed POST when a batch ends, retried with backoff.

The body is JSON ({"id", "type", "createdAt", "batch": {...}, "phase", "pages", "documents",
"output", "message"}). With spec.callback.secretRef (a key of at least decide.MIN_KEY_BYTES) the
request carries

    X-OcrBatch-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, "<t>.<body>")>

The timestamp is inside the signed string, so it cannot be changed without the key: a receiver
checks the signature and refuses a request whose t is further than a tolerance from its own clock
(`verify`, 300 s by default), which bounds how long a captured request can be replayed;
`Idempotency-Key` (the same as the body's id: the batch's uid and the event) lets it drop a second
delivery, which can happen when the operator restarts between the receiver's answer and the status
that records it.

Every attempt goes through the egress guard (egress.py): the host is resolved, refused when any
of its addresses is loopback, link-local, private or the cluster's (unless the chart's allowlist
names it), and the connection is made to the address checked. No proxy from the environment is
used (it would connect in the guard's place), no redirect is followed, and at most
MAX_ANSWER_BYTES of the answer are read. A refused URL is not retried.

408, 429, 5xx and connection errors are retried with exponential backoff (Retry-After honoured,
bounded); any other answer ends the delivery: 2xx Delivered, else GaveUp with the status.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

import aiohttp

from ocr_limits.timestamps import iso

from ocr_operator.runtime.bounded import Busy, TooLarge, read_limited
from ocr_operator.runtime.kube import ApiError

from . import decide, egress

SIGNATURE_HEADER = "X-OcrBatch-Signature"
EVENT_HEADER = "X-OcrBatch-Event"
MAX_ATTEMPTS = 8
FIRST_DELAY, MAX_DELAY = 1.0, 60.0
TIMEOUT_SECONDS = 10.0
MAX_KEY_BYTES = 4096
TOLERANCE_SECONDS = 300
MAX_ANSWER_BYTES = 4096
RETRYABLE = frozenset({408, 429})


def payload(batch: Mapping[str, Any], event: str, now: dt.datetime) -> dict[str, Any]:
    md, spec, st = batch["metadata"], batch.get("spec") or {}, batch.get("status") or {}
    return {
        "id": idempotency_key(batch, event),
        "type": event,
        "createdAt": iso(now),
        "batch": {"namespace": md["namespace"], "name": md["name"], "uid": md.get("uid"),
                  "service": spec.get("service")},
        "phase": st.get("phase"),
        "pages": st.get("pages") or {},
        "documents": st.get("documents") or {},
        "output": spec.get("output") or {},
        "message": next((c.get("message") for c in st.get("conditions") or () if c.get("type") in
                         ("Complete", "Failed", "Cancelled") and c.get("status") == "True"), ""),
    }


def idempotency_key(batch: Mapping[str, Any], event: str) -> str:
    return f"{batch['metadata'].get('uid')}:{event}"


def body_bytes(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def sign(key: bytes, timestamp: int, body: bytes) -> str:
    """The signature header's value over `<timestamp>.<body>`."""
    mac = hmac.new(key, str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(key: bytes, header: str, body: bytes, *, now: float | None = None,
           tolerance: float = TOLERANCE_SECONDS) -> bool:
    """What a receiver does (the tests and the docs' example use it): the signature over
    "<t>.<body>" matches, and t is within `tolerance` seconds of `now` (the receiver's clock), so
    a captured request cannot be replayed later than that."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    t = parts.get("t", "")
    if not (t.isascii() and t.isdigit()) or len(t) > 12:
        return False
    if abs((time.time() if now is None else now) - int(t)) > tolerance:
        return False
    return hmac.compare_digest(sign(key, int(t), body), header)


def retryable(status: int | None) -> bool:
    """None: no answer (connection refused, timeout)."""
    return status is None or status in RETRYABLE or status >= 500


def delay(attempt: int, retry_after: str | None) -> float:
    """Seconds before attempt `attempt + 1` (attempt counts from 1)."""
    if retry_after and retry_after.strip().isdigit():
        return min(MAX_DELAY, float(retry_after.strip()))
    return min(MAX_DELAY, FIRST_DELAY * 2 ** (attempt - 1))


@dataclass(frozen=True)
class Outcome:
    state: str  # Delivered or GaveUp
    attempts: int
    status: int | None
    error: str = ""
    refused: bool = False  # the egress guard refused the URL's host (nothing was sent)


_TOLD = {"Delivered": "delivered", "GaveUp": "gave up"}


def recorded(batch: Mapping[str, Any], event: str, outcome: Outcome, when: str) -> tuple[dict[str, Any], tuple[str, str, str]]:
    """A finished delivery as status.callback records it, and the Event that tells it (type,
    reason, message). Pure: the reconcile that finds the outcome writes both once."""
    record: dict[str, Any] = {"event": event, "id": idempotency_key(batch, event), "state": outcome.state,
                              "attempts": outcome.attempts, "time": when}
    if outcome.status is not None:
        record["lastStatus"] = outcome.status
    if outcome.error:
        record["error"] = outcome.error
    told = (f"{event} to {batch['spec']['callback']['url']}: {_TOLD.get(outcome.state, outcome.state)} after "
            f"{outcome.attempts} attempt(s)" + (f" ({outcome.error})" if outcome.error else ""))
    return record, ("Normal" if outcome.state == "Delivered" else "Warning", f"Callback{outcome.state}", told)


Post = Callable[[str, bytes, dict[str, str]], Awaitable[tuple[int | None, str | None, str]]]


async def http_post(url: str, body: bytes, headers: dict[str, str], *, policy: egress.Policy | None = None,
                    lookup: egress.Lookup = egress.system_lookup) -> tuple[int | None, str | None, str]:
    """(status or None, Retry-After, error) of one POST to the address the guard checked;
    egress.Refused when it refuses the host."""
    try:
        host, _, address = await egress.pin(url, policy or egress.Policy.from_env(), lookup)
    except egress.Refused:
        raise
    except (OSError, asyncio.TimeoutError, Busy) as exc:  # the name did not resolve (now): retried
        return None, None, f"resolving the host: {type(exc).__name__}: {exc}"[:300]
    try:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
        connector = aiohttp.TCPConnector(resolver=egress.PinnedResolver(host, address), use_dns_cache=False,
                                         limit=1, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
            async with session.post(url, data=body, headers=headers, allow_redirects=False) as resp:
                try:
                    await read_limited(resp.content, MAX_ANSWER_BYTES)
                except TooLarge:
                    pass  # the answer's status is what counts; the rest is not read
                return resp.status, resp.headers.get("Retry-After"), ""
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        return None, None, f"{type(exc).__name__}: {exc}"[:300]


async def deliver(url: str, doc: Mapping[str, Any], key: bytes | None, *, post: Post = http_post,
                  sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
                  clock: Callable[[], float] = time.time, max_attempts: int = MAX_ATTEMPTS) -> Outcome:
    """POST `doc` to `url` until it is answered with something other than 408/429/5xx, or attempts run out."""
    body = body_bytes(doc)
    status: int | None = None
    error = ""
    for attempt in range(1, max_attempts + 1):
        headers = {"Content-Type": "application/json", "Idempotency-Key": str(doc["id"]),
                   EVENT_HEADER: str(doc["type"]), "User-Agent": "causalflow-ocr-operator"}
        if key is not None:
            headers[SIGNATURE_HEADER] = sign(key, int(clock()), body)
        try:
            status, retry_after, error = await post(url, body, headers)
        except egress.Refused as exc:
            return Outcome("GaveUp", attempt, None, f"refused: {exc}"[:300], refused=True)
        if status is not None and 200 <= status < 300:
            return Outcome("Delivered", attempt, status)
        if not retryable(status):
            return Outcome("GaveUp", attempt, status, f"answered {status}: not retried")
        if attempt < max_attempts:
            await sleep(delay(attempt, retry_after))
    return Outcome("GaveUp", max_attempts, status, error or f"answered {status} {max_attempts} times")


async def send(kube: Any, ns: str, batch: Mapping[str, Any], event: str) -> Outcome:
    """POST the event to spec.callback.url, signed with the key of spec.callback.secretRef (read by
    name through `kube`), retried (deliver). Never raises: a missing or short key gives up at once."""
    cb = batch["spec"]["callback"]
    hmac_key = None
    try:
        if cb.get("secretRef"):
            ref = cb["secretRef"]
            secret = await kube.get("Secret", ns, ref["name"])
            value = ((secret or {}).get("data") or {}).get(ref.get("key") or "secret")
            if value is None:  # the same words whether the Secret or its key is gone (decide.preflight)
                raise ValueError(f"spec.callback.secretRef: Secret {ref['name']} does not exist or lacks the key "
                                 f"{ref.get('key') or 'secret'}")
            hmac_key = base64.b64decode(value)[:MAX_KEY_BYTES]
            if (problem := decide.key_problem(hmac_key)) is not None:
                raise ValueError(f"spec.callback.secretRef: {problem}")
        now = dt.datetime.now(dt.timezone.utc)
        return await deliver(cb["url"], payload(batch, event, now), hmac_key)
    except (ApiError, ValueError) as exc:
        return Outcome("GaveUp", 0, None, str(exc)[:300])
