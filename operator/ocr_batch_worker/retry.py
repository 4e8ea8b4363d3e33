"""What the worker does with an answer of the OcrService: keep it, wait and resend, or give up (pure).

- 200: the page is done.
- 429: the server sheds batch traffic to serve interactive requests first. Wait Retry-After
  (or the backoff) and resend; this is not a failure and does not use up the retries, but the
  time spent waiting so for one page is bounded (max_shed_wait).
- 408, 500, 502, 503, 504 and connection errors: transient (a pod restarting, a rollout, a
  deadline): resend after an exponential backoff (Retry-After when given), at most max_retries
  times; then the page fails with the last reason.
- 401, 403: every page would get the same answer (a wrong or missing API key): stop the worker.
- other 4xx: this page is refused (corrupt image, too large, a batch line naming another model):
  it fails at once, the batch goes on.
"""

from __future__ import annotations

from dataclasses import dataclass

from ocr_limits.outages import exponential

TRANSIENT = frozenset({408, 500, 502, 503, 504})
FATAL = frozenset({401, 403})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    base_seconds: float = 1.0
    cap_seconds: float = 60.0
    max_retry_after: float = 300.0  # a larger Retry-After is read as this
    max_shed_wait: float = 3600.0  # total wait on 429s for one page


@dataclass(frozen=True)
class Done:
    pass


@dataclass(frozen=True)
class Retry:
    delay: float
    shed: bool  # a 429: does not count as a retry


@dataclass(frozen=True)
class GiveUp:
    reason: str


@dataclass(frozen=True)
class Fatal:
    reason: str


Decision = Done | Retry | GiveUp | Fatal


def retry_after_seconds(value: str | None, policy: RetryPolicy) -> float | None:
    """Retry-After in seconds (the delay-seconds form; an HTTP date or garbage is ignored), bounded."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    if seconds != seconds or seconds < 0:  # NaN, negative
        return None
    return min(seconds, policy.max_retry_after)


def backoff(attempt: int, jitter: float, policy: RetryPolicy) -> float:
    """The delay before a page's `attempt`-th retry (0-based)."""
    return exponential(attempt, jitter, policy.base_seconds, policy.cap_seconds)


def decide(status: int | None, reason: str, retry_after: str | None, retries: int, shed_waited: float,
           jitter: float, policy: RetryPolicy) -> Decision:
    """The next step after an answer with `status` (None: no answer; `reason` says why), given the
    retries already made and the seconds already waited on 429s for this page."""
    if status == 200:
        return Done()
    after = retry_after_seconds(retry_after, policy)
    if status == 429:
        delay = after if after is not None else backoff(0, jitter, policy)
        if shed_waited + delay > policy.max_shed_wait:
            return GiveUp(f"the server kept shedding batch requests (429) for {shed_waited:.0f} s: {reason}")
        return Retry(delay, shed=True)
    if status in FATAL:
        return Fatal(f"the OcrService answered {status}: {reason}")
    if status is None or status in TRANSIENT:
        if retries >= policy.max_retries:
            what = "no answer" if status is None else f"{status}"
            return GiveUp(f"{what} after {retries + 1} attempts: {reason}")
        return Retry(after if after is not None else backoff(retries, jitter, policy), shed=False)
    return GiveUp(f"{status}: {reason}")
