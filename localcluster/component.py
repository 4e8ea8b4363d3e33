"""One process of the local cluster (etcd, an API server, kwok, a kubelet...): started in its own
session with its output appended to its log, stopped by its PID only (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from localcluster.machine import pid_alive


# The Go garbage collector's target for the harness's daemons (etcd, the API server, the controllers,
# kwok, containerd, the kubelet, Prometheus), unless the environment sets GOGC (Go's default is 100):
# the harness trades memory for CPU, which a 2-core machine running the suite has less of. Measured
# on 2 cores, the same requests against a fresh cluster, GOGC unset against 400: the API server 21.9
# -> 18.5 CPU s with its RSS 436 -> 901 MiB, the controller manager 7.5 -> 6.5, etcd 4.6 -> 4.4.
GOGC = "400"


def component_env(env: dict[str, str] | None) -> dict[str, str]:
    """`env` (else this process's environment) with GOGC, unless it sets its own."""
    return {"GOGC": GOGC, **(os.environ if env is None else env)}


@dataclass
class Component:
    name: str
    argv: list[str]
    log: Path
    pid: int | None = None
    env: dict[str, str] | None = None
    _proc: subprocess.Popen | None = field(default=None, repr=False)

    def start(self) -> None:
        """Start the process (again, after `stop`), its output appended to its log."""
        with open(self.log, "ab") as log:
            self._proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env=component_env(self.env),
            )
        self.pid = self._proc.pid

    def alive(self) -> bool:
        if self._proc is not None:
            return self._proc.poll() is None
        return self.pid is not None and pid_alive(self.pid)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; reaps the child when we are its parent."""
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._proc is not None:
            self._proc.wait(timeout=5)
        else:
            while pid_alive(self.pid) and time.monotonic() < deadline + 5:
                time.sleep(0.05)
        self._proc = None

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
