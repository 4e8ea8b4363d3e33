"""Leader election on a coordination.k8s.io/v1 Lease: the pure decisions (no I/O, no clock).

Why: two operator processes reconciling the same OcrServices would fight over every child (two
rollout state machines, two rollbacks). Only the holder of one Lease reconciles; the others stand
by. The rules are client-go's (k8s.io/client-go/tools/leaderelection), so the Lease reads the
same in `kubectl get lease` as any controller's:

- a holder renews every retry period; if it has not renewed for the renew deadline it has lost
  the lease and must stop at once (the process exits);
- a candidate takes the lease only when nobody holds it, or the holder's record has not changed
  for the lease's duration *as measured on the candidate's own clock* from when it first saw that
  record (never by comparing clocks across machines through renewTime);
- every write is a replace carrying the resourceVersion read, so of two candidates one wins and
  the other gets 409 Conflict;
- a holder that stops gracefully releases: empty holder, duration 1 s, so a standby takes over at
  its next retry instead of after the full lease duration.

election.py does the I/O (the API calls, the thread, the standby's health endpoint).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from ocr_limits.timestamps import iso_micro as micro_time  # a Lease's MicroTime

from .kinds import LEASE

# client-go's JitterFactor: a candidate waits retry_period * (1 + up to 1.2) between attempts, so
# replicas started together do not ask in lockstep.
JITTER_FACTOR = 1.2
MAX_LEASE_DURATION = 600
MIN_RETRY_PERIOD = 0.1
MAX_IDENTITY = 128
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class ElectionConfig:
    """Where the Lease is, who we are, and the three timings (client-go's defaults)."""

    namespace: str
    name: str
    identity: str
    lease_duration: int = 15     # seconds a record stays valid without renewal (leaseDurationSeconds)
    renew_deadline: float = 10.0  # a holder that has not renewed for this long stops leading
    retry_period: float = 2.0    # between attempts to acquire or renew


def config_errors(cfg: ElectionConfig) -> list[str]:
    """What is wrong with `cfg`, each naming the command-line flag that sets it; empty when fine.

    lease duration > renew deadline > 1.2 x retry period, as client-go requires: a holder must give
    up before a candidate may take over, and get more than one attempt before it gives up."""
    errors = []
    if not _DNS_LABEL.match(cfg.namespace or ""):
        errors.append(f"--leader-elect-resource-namespace: {cfg.namespace!r} is not a namespace name "
                      "(set it, or POD_NAMESPACE)")
    if not _DNS_SUBDOMAIN.match(cfg.name or ""):
        errors.append(f"--leader-elect-resource-name: {cfg.name!r} is not a valid object name")
    if not cfg.identity or len(cfg.identity) > MAX_IDENTITY:
        errors.append(f"identity (POD_NAME or the hostname): 1 to {MAX_IDENTITY} characters")
    if not 1 <= cfg.lease_duration <= MAX_LEASE_DURATION:
        errors.append(f"--leader-elect-lease-duration: {cfg.lease_duration} not in 1..{MAX_LEASE_DURATION} seconds")
    if not cfg.retry_period >= MIN_RETRY_PERIOD:
        errors.append(f"--leader-elect-retry-period: {cfg.retry_period} is under {MIN_RETRY_PERIOD} s")
    if not cfg.renew_deadline < cfg.lease_duration:
        errors.append(f"--leader-elect-renew-deadline: {cfg.renew_deadline} s must be under the lease "
                      f"duration ({cfg.lease_duration} s)")
    if not cfg.renew_deadline > JITTER_FACTOR * cfg.retry_period:
        errors.append(f"--leader-elect-renew-deadline: {cfg.renew_deadline} s must be over "
                      f"{JITTER_FACTOR} x the retry period ({cfg.retry_period} s)")
    return errors


@dataclass(frozen=True)
class LeaseRecord:
    """The Lease's spec, as the election reads it."""

    holder: str = ""
    duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> "LeaseRecord":
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "", duration=int(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))


@dataclass(frozen=True)
class Observed:
    """A record and when (our monotonic clock) we first saw it: expiry counts from then."""

    record: LeaseRecord
    at: float


class Action(enum.Enum):
    CREATE = "create"    # no Lease yet: create it, holding it
    ACQUIRE = "acquire"  # free or expired: take it over (one more transition)
    RENEW = "renew"      # ours: write a new renewTime
    WAIT = "wait"        # someone else holds it and it has not expired


def observe(previous: Observed | None, record: LeaseRecord, now: float) -> Observed:
    """The observation after reading `record` at `now`: the clock restarts only when it changed."""
    if previous is not None and previous.record == record:
        return previous
    return Observed(record, now)


def decide(observed: Observed | None, identity: str, now: float) -> Action:
    """What to do with the Lease as last observed (None: there is no Lease)."""
    if observed is None:
        return Action.CREATE
    record = observed.record
    if record.holder == identity:
        return Action.RENEW
    if record.holder and now < observed.at + record.duration:
        return Action.WAIT
    return Action.ACQUIRE


def lost(last_renewed: float, now: float, renew_deadline: float) -> bool:
    """Whether a holder that last renewed at `last_renewed` must stop leading at `now`."""
    return now - last_renewed > renew_deadline


def retry_wait(cfg: ElectionConfig, leading: bool, jitter: float) -> float:
    """Seconds until the next attempt; `jitter` in [0, 1) spreads a candidate's (client-go's
    JitterUntil); a holder renews on the period exactly."""
    if leading:
        return cfg.retry_period
    return cfg.retry_period * (1 + JITTER_FACTOR * min(max(jitter, 0.0), 1.0))


def lease_body(action: Action, current: Mapping[str, Any] | None, cfg: ElectionConfig,
               now: datetime) -> dict[str, Any]:
    """The Lease to write for `action` (not WAIT): a new one to create, or a replacement of
    `current` carrying its resourceVersion, so that a concurrent writer makes ours fail with 409."""
    if action is Action.WAIT:
        raise ValueError("nothing to write while waiting")
    stamp = micro_time(now)
    old = LeaseRecord.of(current) if current is not None else LeaseRecord()
    spec: dict[str, Any] = {"holderIdentity": cfg.identity, "leaseDurationSeconds": cfg.lease_duration,
                            "renewTime": stamp}
    if action is Action.RENEW:
        spec["acquireTime"] = old.acquire_time or stamp
        spec["leaseTransitions"] = old.transitions
    else:
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = old.transitions + 1 if action is Action.ACQUIRE else 0
    return _body(current, cfg, spec)


def release_body(current: Mapping[str, Any], cfg: ElectionConfig, now: datetime) -> dict[str, Any] | None:
    """The replacement that gives up `current`, or None when it is not ours to give up: no holder,
    a 1-second duration (client-go's release), so a standby acquires at its next attempt."""
    old = LeaseRecord.of(current)
    if old.holder != cfg.identity:
        return None
    stamp = micro_time(now)
    spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": stamp, "renewTime": stamp,
            "leaseTransitions": old.transitions}
    return _body(current, cfg, spec)


def _body(current: Mapping[str, Any] | None, cfg: ElectionConfig, spec: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": cfg.name, "namespace": cfg.namespace}
    if current is not None:
        md = current.get("metadata") or {}
        metadata["resourceVersion"] = md.get("resourceVersion")
        for keep in ("labels", "annotations"):
            if md.get(keep):
                metadata[keep] = dict(md[keep])
    return {"apiVersion": LEASE.api_version, "kind": LEASE.kind, "metadata": metadata, "spec": spec}
