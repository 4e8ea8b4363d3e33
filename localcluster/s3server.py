"""A real S3 server on this machine for the batch storage tests: versitygw with its POSIX backend.

versitygw (github.com/versity/versitygw, Apache-2.0) is built from the Go module proxy by
build-versitygw.sh, cached by version like the harness's other binaries. `S3Server` runs one:

- on a free port (ports.free_port), listening only on loopback and, for pods, on the real node's
  IP (realnode.NODE_IP, on the harness's own bridge `cfo-node`: pods on the real node reach the
  host there, as they reach the API server's relay). Any other address is refused before it starts;
- with a fresh temporary root (buckets are its directories) and generated root credentials, passed
  in the environment, not on the command line (where `ps` would show the secret). The environment
  is otherwise only PATH and TMPDIR: a VGW_* variable of the caller cannot turn on another listener;
- ready when its health endpoint answers; stopped by its own PID, and its directory removed, so
  nothing is left behind.
- with `access_log=True`, versitygw's access log in that directory: `clients()` gives each
  request's client address and S3 operation (which pods, or which process, talked to it).

    with S3Server() as s3:                             # loopback only
        s3.endpoint, s3.access_key, s3.secret_key
    with S3Server(hosts=(LOOPBACK, NODE_IP)) as s3:    # also for pods on the real node
        s3.endpoint_for(NODE_IP)

`python -m localcluster.s3server [--for-pods]` runs one until Ctrl-C and prints how to reach it.
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Sequence

from localcluster.ports import free_port
from localcluster.nodeconfig import NODE_IP

BUILD_SCRIPT = Path(__file__).with_name("build-versitygw.sh")
LOOPBACK = "127.0.0.1"
ALLOWED_HOSTS = (LOOPBACK, NODE_IP)  # loopback, and the real node's IP on the harness bridge
HEALTH_PATH = "/health"
REGION = "us-east-1"


class S3ServerError(RuntimeError):
    """versitygw could not be built, started or reached; the message names the step and its log."""


def versitygw_binary(build: bool = True) -> Path:
    """The pinned versitygw, built first (minutes, once per version) when `build` and not cached."""
    if build:
        proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise S3ServerError(f"building versitygw failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    out = subprocess.run(["bash", str(BUILD_SCRIPT), "--print-bin"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def listen_addresses(hosts: Sequence[str], port: int) -> list[str]:
    """`host:port` for each host; refuses any host but loopback and the node IP (never 0.0.0.0)."""
    if not hosts:
        raise S3ServerError("hosts: at least one of " + ", ".join(ALLOWED_HOSTS))
    bad = [h for h in hosts if h not in ALLOWED_HOSTS]
    if bad:
        raise S3ServerError(f"hosts: {bad} not allowed; versitygw listens only on {', '.join(ALLOWED_HOSTS)}")
    if not 1 <= port <= 65535:
        raise S3ServerError(f"port: {port} is not a TCP port")
    return [f"{h}:{port}" for h in dict.fromkeys(hosts)]


def gateway_argv(binary: Path, addresses: Sequence[str], root: Path, access_log: Path | None = None) -> list[str]:
    """versitygw's command line: the S3 port on each address, a health path, the POSIX root, and
    with `access_log` a file with one line per S3 request. No admin port, web UI or metrics:
    nothing else listens."""
    log = [f"--access-log={access_log}"] if access_log is not None else []
    return [str(binary), *(f"--port={a}" for a in addresses), f"--health={HEALTH_PATH}", "--quiet", *log,
            "posix", str(root)]


# An access log line: bucket owner, bucket, [time with its zone], the client's address, ...
_ACCESS_LINE = re.compile(r"^\S+ \S+ \[[^\]]*\] (\S+) \S+ \S+ (\S+)")


def access_log_clients(text: str) -> list[tuple[str, str]]:
    """(client address, S3 operation) of each request in versitygw's access log."""
    return [(m.group(1), m.group(2)) for m in map(_ACCESS_LINE.match, text.splitlines()) if m]


def gateway_env(access_key: str, secret_key: str, region: str, tmp: Path) -> dict[str, str]:
    """The root credentials in versitygw's own variables, and nothing of the caller's but PATH."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TMPDIR": str(tmp),
            "ROOT_ACCESS_KEY": access_key, "ROOT_SECRET_KEY": secret_key, "VGW_REGION": region}


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class S3Server:
    """One versitygw process with a temporary POSIX root; a context manager, stopped by its PID."""

    def __init__(self, hosts: Sequence[str] = (LOOPBACK,), region: str = REGION, access_log: bool = False) -> None:
        listen_addresses(hosts, 1)  # refuse a bad host before anything starts
        self.hosts = tuple(dict.fromkeys(hosts))
        self.access_log = access_log
        self.region = region
        self.access_key = "cfo" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(30)
        self.port: int | None = None
        self.dir: Path | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def root(self) -> Path:
        """The POSIX backend's root: each directory in it is a bucket."""
        assert self.dir is not None, "not started"
        return self.dir / "root"

    @property
    def log_path(self) -> Path:
        assert self.dir is not None, "not started"
        return self.dir / "versitygw.log"

    def clients(self) -> list[tuple[str, str]]:
        """(client address, S3 operation) of every request so far (needs access_log=True)."""
        assert self.dir is not None and self.access_log, "started with access_log=True"
        path = self.dir / "access.log"
        return access_log_clients(path.read_text(errors="replace")) if path.exists() else []

    @property
    def endpoint(self) -> str:
        return self.endpoint_for(self.hosts[0])

    def endpoint_for(self, host: str) -> str:
        if host not in self.hosts or self.port is None:
            raise S3ServerError(f"not listening on {host} (hosts {self.hosts}, port {self.port})")
        return f"http://{host}:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _pick_port(self) -> int:
        for _ in range(20):
            port = free_port(self.hosts[0])
            if all(_bindable(h, port) for h in self.hosts[1:]):
                return port
        raise S3ServerError(f"no port free on all of {self.hosts}")

    def start(self, timeout: float = 30) -> S3Server:
        binary = versitygw_binary()
        self.dir = Path(tempfile.mkdtemp(prefix="causalflow-s3-"))
        self.root.mkdir()
        (self.dir / "tmp").mkdir()
        self.port = self._pick_port()
        argv = gateway_argv(binary, listen_addresses(self.hosts, self.port), self.root,
                            self.dir / "access.log" if self.access_log else None)
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=gateway_env(self.access_key, self.secret_key, self.region, self.dir / "tmp"))
        deadline = time.monotonic() + timeout
        while not self._healthy():
            if not self.alive() or time.monotonic() > deadline:
                why = "exited" if not self.alive() else f"not healthy after {timeout:.0f}s"
                log_text = self.log_path.read_text(errors="replace")[-3000:]
                self.stop()
                raise S3ServerError(f"versitygw on {self.hosts} port {self.port} {why}:\n{log_text}")
            time.sleep(0.1)
        return self

    def _healthy(self) -> bool:
        # No proxy: the machine's proxy variables must not route a local address anywhere else.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"{self.endpoint}{HEALTH_PATH}", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM (SIGKILL after `timeout`) to our own PID, then remove the root and the log."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> S3Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m localcluster.s3server", description=__doc__.split("\n")[0])
    parser.add_argument("--for-pods", action="store_true",
                        help=f"also listen on the real node's IP {NODE_IP} (the real node must be running)")
    args = parser.parse_args(argv)
    with S3Server(hosts=(LOOPBACK, NODE_IP) if args.for_pods else (LOOPBACK,)) as s3:
        print(f"versitygw (pid {s3.pid}) serving {s3.root}")
        for host in s3.hosts:
            print(f"  endpoint: {s3.endpoint_for(host)}")
        print(f"  AWS_ACCESS_KEY_ID={s3.access_key} AWS_SECRET_ACCESS_KEY={s3.secret_key} AWS_REGION={s3.region}")
        print("Ctrl-C stops it and removes its root.")
        try:
            s3.proc.wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
