"""The real operator (`python -m ocr_operator`) as a process against a cluster, and its constants.

Shared by the e2e tests (their `ocr_operator` fixture), `bench/` and `hack/`: the process is
restartable (`kill()` for a crash, `start()` again), always stopped by its own PID, up when kopf's
liveness endpoint answers; its log goes to a file. `OperatorProcess.launcher`, when a caller sets
it, starts the process instead of a plain exec: the e2e tests fork it from a process that has
imported kopf already (tests/zygote.py), the same `python -m ocr_operator` with the same arguments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Callable, ClassVar

from localcluster.ports import free_port
from localcluster.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
CRDS = REPO / "crds"
CRD_FILE = CRDS / "ocr.causalflow.dev_ocrservices.yaml"
OPERATOR_USER = "causalflow-operator"
FIELD_MANAGER = "causalflow-ocr-operator"


class OperatorProcess:
    """One `python -m ocr_operator` process; restartable, always stopped by its own PID."""

    # (arguments after `-m ocr_operator`, environment, log file) -> a started process with
    # Popen's pid, poll, wait, send_signal and returncode, or None to exec it as usual.
    launcher: ClassVar[Callable[[list[str], dict[str, str], Path], object | None] | None] = None

    def __init__(self, kubeconfig: Path, namespaces: list[str] | None, log_path: Path,
                 extra_env: dict[str, str] | None = None, extra_args: list[str] | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.namespaces = namespaces
        self.log_path = log_path
        self.extra_env = extra_env or {}
        self.extra_args = list(extra_args or ())
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        # Its Prometheus metrics: one port for the life of this object, so a restarted operator
        # is the same scrape target.
        self.metrics_port = free_port()
        self.starts = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60) -> "OperatorProcess":
        self.port = free_port()
        scope = [a for ns in self.namespaces for a in ("--namespace", ns)] if self.namespaces else ["--all-namespaces"]
        args = [*scope, "--liveness-host", "127.0.0.1", "--liveness-port", str(self.port), "--metrics-host",
                "127.0.0.1", "--metrics-port", str(self.metrics_port), "--log-level", "info", *self.extra_args]
        argv = [sys.executable, "-m", "ocr_operator", *args]
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), PYTHONUNBUFFERED="1", **self.extra_env)
        with self.log_path.open("a") as log:
            log.write(f"\n===== start #{self.starts + 1}: {' '.join(argv)}\n")
            log.flush()
            launched = type(self).launcher(args, env, self.log_path) if type(self).launcher else None
            self.proc = launched if launched is not None else subprocess.Popen(  # type: ignore[assignment]
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        self.starts += 1
        wait_for(self._healthy, timeout=timeout, interval=0.3,
                 message=f"operator liveness on 127.0.0.1:{self.port} (log: {self.log_path})")
        return self

    def _healthy(self) -> bool:
        if not self.alive():
            raise AssertionError(f"operator exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def probe(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as resp:
            return json.load(resp)

    def kill(self) -> None:
        """SIGKILL: no cleanup, no graceful shutdown (a crash or an OOM kill)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 10) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])
