"""Leader election's I/O: the elector thread that reads and writes the Lease, and the health
endpoint a standby serves while it waits.

The elector runs on a thread of its own, with its own event loop and API client: a burst of
reconciles on the operator's loop never delays a renewal (a renewal that waited behind them would
lose the lease), and its requests never count in the controller's request counters. The
decisions are leader.py's; this module only performs them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from . import leader
from .identity import Identity
from .kube import ApiError, Kube

log = logging.getLogger(__name__)


class Elector:
    """Acquires the Lease, then renews it until stopped (releasing it) or until it cannot renew
    within the renew deadline, when `on_lost` is called (the process exits: what it was doing
    as leader can no longer be trusted to be the only writer)."""

    def __init__(self, cfg: leader.ElectionConfig, on_lost: Callable[[], None], identity: Identity | None = None,
                 kube_factory: Callable[[], Any] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        """`identity`: the operator's, for its own API client (else `kube_factory` makes the client)."""
        self.cfg = cfg
        self._on_lost = on_lost
        if kube_factory is None:
            if identity is None:
                raise ValueError("an Elector needs an identity or a kube_factory")
            kube_factory = lambda: Kube(identity, timeout=cfg.renew_deadline)  # noqa: E731
        self._kube_factory = kube_factory
        self._clock = clock
        self.leading = threading.Event()
        self.finished = threading.Event()
        self.observed: leader.Observed | None = None
        self.last_attempt: float | None = None
        self.error: str | None = None
        self._release = True
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="leader-election", daemon=True)

    # ------------------------------------------------------------------ the thread's side

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # noqa: BLE001  (reported by health(): the thread is gone)
            self.error = repr(exc)
            log.exception("leader election stopped")
            if self.leading.is_set() and not self._stopping.is_set():
                self._on_lost()  # nobody renews any more: leading on would soon mean two leaders
        finally:
            self.finished.set()

    async def _run(self) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stopping.is_set():  # stop() came before the loop existed
            self._stop.set()
        kube = self._kube_factory()
        try:
            await self._elect(kube)
            if self._release:
                await self._give_up(kube)
        finally:
            await kube.close()

    async def _elect(self, kube) -> None:
        cfg = self.cfg
        last_renewed = 0.0
        while not self._stop.is_set():
            leading = self.leading.is_set()
            now = self._clock()
            budget = max(0.0, last_renewed + cfg.renew_deadline - now) if leading else cfg.renew_deadline
            try:
                ok = await asyncio.wait_for(self._attempt(kube), timeout=budget)
            except (ApiError, asyncio.TimeoutError) as exc:
                ok = False
                self.error = str(exc) or "timed out"
                log.warning("leader election: %s of lease %s/%s failed: %s", "renewal" if leading else "attempt",
                            cfg.namespace, cfg.name, self.error)
            except Exception as exc:  # noqa: BLE001  (a bug or a malformed Lease: counts as a failed attempt)
                ok = False
                self.error = repr(exc)
                log.exception("leader election: %s of lease %s/%s failed", "renewal" if leading else "attempt",
                              cfg.namespace, cfg.name)
            now = self.last_attempt = self._clock()
            if ok:
                last_renewed = now
                self.error = None
                if not leading:
                    log.info("leader election: %s acquired lease %s/%s; reconciling", cfg.identity,
                             cfg.namespace, cfg.name)
                    self.leading.set()
            elif leading and leader.lost(last_renewed, now, cfg.renew_deadline):
                log.critical("leader election: lease %s/%s lost (not renewed for %.1f s, holder now %r); "
                             "stopping at once", cfg.namespace, cfg.name, now - last_renewed, self.holder)
                self._release = False
                self._on_lost()
                return
            wait = leader.retry_wait(cfg, self.leading.is_set(), random.random())
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=wait)
            except asyncio.TimeoutError:
                pass

    async def _attempt(self, kube) -> bool:
        """client-go's tryAcquireOrRenew: whether we hold the Lease after this attempt."""
        cfg = self.cfg
        lease = await kube.get("Lease", cfg.namespace, cfg.name)
        now = self._clock()
        if lease is None:
            action = leader.Action.CREATE
        else:
            self.observed = leader.observe(self.observed, leader.LeaseRecord.of(lease), now)
            action = leader.decide(self.observed, cfg.identity, now)
        if action is leader.Action.WAIT:
            return False
        body = leader.lease_body(action, lease, cfg, datetime.now(timezone.utc))
        try:
            if action is leader.Action.CREATE:
                written = await kube.create("Lease", cfg.namespace, body)
            else:
                written = await kube.replace(body)
        except ApiError as exc:
            if exc.status in (409, 422):  # someone else wrote (or created) it first: look again next time
                return False
            raise
        self.observed = leader.Observed(leader.LeaseRecord.of(written), now)
        if action is leader.Action.ACQUIRE and lease is not None:
            log.info("leader election: took over lease %s/%s from %r (transition %d)", cfg.namespace, cfg.name,
                     leader.LeaseRecord.of(lease).holder, self.observed.record.transitions)
        return True

    async def _give_up(self, kube) -> None:
        cfg = self.cfg
        if not self.leading.is_set():
            return
        try:
            lease = await asyncio.wait_for(kube.get("Lease", cfg.namespace, cfg.name), timeout=cfg.retry_period)
            body = leader.release_body(lease, cfg, datetime.now(timezone.utc)) if lease else None
            if body is not None:
                await asyncio.wait_for(kube.replace(body), timeout=cfg.retry_period)
                log.info("leader election: released lease %s/%s", cfg.namespace, cfg.name)
        except (ApiError, asyncio.TimeoutError) as exc:
            log.warning("leader election: could not release lease %s/%s (a standby takes over when it "
                        "expires): %s", cfg.namespace, cfg.name, exc)

    # ------------------------------------------------------------------ the caller's side

    @property
    def holder(self) -> str:
        return self.observed.record.holder if self.observed else ""

    def start(self) -> "Elector":
        self._thread.start()
        return self

    def wait_leading(self, stopping: threading.Event) -> bool:
        """Block until we lead (True), or `stopping` is set or the elector died (False)."""
        while not self.leading.wait(0.2):
            if stopping.is_set() or self.finished.is_set():
                return False
        return True

    def stop(self, *, release: bool = True, timeout: float | None = None) -> None:
        """Stop renewing, and release the Lease if we hold it (after the reconciles stopped)."""
        self._release = release
        self._stopping.set()
        if self._loop is not None and self._stop is not None and not self.finished.is_set():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # its loop closed meanwhile: the thread is ending anyway
                pass
        self._thread.join(timeout if timeout is not None else 2 * self.cfg.retry_period + 1)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy while the elector thread runs and its last attempt (successful or not) is no
        older than a lease duration plus the longest wait: it is still taking part."""
        now = self._clock()
        stalled = (self.last_attempt is not None
                   and now - self.last_attempt > self.cfg.lease_duration + self.cfg.renew_deadline
                   + leader.retry_wait(self.cfg, False, 1.0))
        ok = self._thread.is_alive() and not self.finished.is_set() and not stalled
        return ok, {"leader": self.leading.is_set(), "identity": self.cfg.identity, "holder": self.holder,
                    "lease": f"{self.cfg.namespace}/{self.cfg.name}", "error": self.error}


class StandbyHealth:
    """/healthz on the liveness port while the process stands by, in place of kopf's (which
    starts only with the reconciles): 200 while the elector is alive, so the kubelet keeps the
    standby and `helm install --wait` sees every replica Ready."""

    def __init__(self, host: str, port: int, health: Callable[[], tuple[bool, dict[str, Any]]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802  (http.server's name)
                if self.path.split("?")[0] != "/healthz":
                    self.send_error(404)
                    return
                ok, body = health()
                data = json.dumps(body).encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # the kubelet probes every few seconds: no access log
                return None

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="standby-health", daemon=True)

    def start(self) -> "StandbyHealth":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port, for kopf's own endpoint to take it."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
