"""Server test fixtures: the tiny model written once, real `python -m ocr_server` processes on 127.0.0.1."""

from __future__ import annotations

import getpass
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from localcluster.ports import free_port
from ocr_server_testing import tiny_cache

from tests.zygote import FORKS, Forked, Zygote, die_with_parent, enabled as forking_enabled

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class ServerProcess:
    proc: "subprocess.Popen | Forked"
    url: str
    log_path: Path
    first_health: httpx.Response | None = None
    temp_dir: Path | None = None  # its TMPDIR: what it (vLLM's sockets included) leaves goes with the test's

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) for a raw socket (`socket.create_connection`) or http.client."""
        host, port = self.url.rsplit("/", 1)[1].split(":")
        return host, int(port)

    def client(self, **kw) -> httpx.Client:
        if self.url.startswith("http://"):
            kw.setdefault("verify", False)  # plain HTTP: no CA bundle to load (25 ms of CPU a client)
        return httpx.Client(base_url=self.url, timeout=kw.pop("timeout", 120), **kw)

    def get(self, path: str, timeout: float = 5) -> httpx.Response:
        """One GET, as a poll makes it: through client(), so plain HTTP loads no CA bundle."""
        with self.client(timeout=timeout) as client:
            return client.get(path)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def vm_rss_kib(pid: int) -> int:
    """A process's resident memory now (VmRSS of /proc/<pid>/status), in KiB."""
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", text).group(1))


def trickle(server: ServerProcess, head: bytes, data: bytes, seconds: float) -> tuple[bytes, int, float]:
    """Send `head` at once, then `data` a byte a second on one connection, reading before each byte
    (a byte sent after the server closed would reset the connection and lose its answer), until the
    server closes it or `seconds` pass. Returns what it answered, the bytes of `data` sent and the
    seconds since it connected: timed from before the connect, so that no timer the server starts
    at its accept or on `head` can have started earlier (timed after them, a client descheduled a
    moment measured 3.9995 s and 3.9997 s of a 4 s timeout)."""
    t0 = time.monotonic()
    with socket.create_connection(server.address, timeout=seconds) as s:
        s.sendall(head)
        answer, sent = b"", 0
        while time.monotonic() - t0 < seconds:
            if select.select([s], [], [], 1.0)[0]:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
                continue
            s.sendall(data[sent:sent + 1])
            sent += 1
        return answer, sent, time.monotonic() - t0


def start_server(tmp: Path, env: dict[str, str], module: str = "ocr_server", wait_ready: bool = True,
                 timeout: float = 120, python: str = sys.executable) -> ServerProcess:
    port = free_port()
    # WARMUP=0 unless a test asks for it: the warm-up's two generations cost seconds per start on CPU
    full = {**os.environ, "HOST": "127.0.0.1", "PORT": str(port), "DEVICE": "cpu", "PYTHONUNBUFFERED": "1",
            "WARMUP": "0", **env}
    for key in ("API_KEYS", "CONFIG_FILE"):
        if key not in env:
            full.pop(key, None)
    # Its own temporary directory, under the test's: vLLM's engine leaves its IPC sockets and its
    # rendezvous file (vllm_dist_*) in the temporary directory, eight entries in /tmp a server. But
    # torch's compile cache stays where it was (it defaults to the temporary directory): shared by
    # the servers of a run and kept for the next run.
    full.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"))
    temp_dir = Path(full.setdefault("TMPDIR", str(tmp / f"tmp-{port}")))
    temp_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp / f"server-{port}.log"
    proc: subprocess.Popen | Forked
    forkable = module in FORKS["ocr_server"] and python == sys.executable and forking_enabled()
    zygote = Zygote.get(ROOT) if forkable else None
    if zygote is not None and zygote.compatible(full):
        proc = zygote.fork(full, ROOT, log_path, module=module)  # `python -m MODULE`, its imports inherited
    else:
        proc = subprocess.Popen([python, "-m", module], env=full, cwd=ROOT, preexec_fn=die_with_parent,
                                stdout=log_path.open("wb"), stderr=subprocess.STDOUT)
    server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path, temp_dir=temp_dir)
    if wait_ready:
        wait_for(server, 200, timeout)
    return server


def wait_for(server: ServerProcess, status: int, timeout: float = 120) -> httpx.Response:
    """Poll /health every 0.1 s through one client: an httpx.get per poll builds a client and loads
    the CA bundle each time (25 ms of CPU), 63 CPU s of a make test while servers started."""
    deadline = time.monotonic() + timeout
    last = None
    with server.client(timeout=5) as client:
        while time.monotonic() < deadline:
            if server.proc.poll() is not None:
                raise AssertionError(f"server exited with {server.proc.returncode}:\n{server.log()[-3000:]}")
            try:
                last = client.get("/health")
                if last.status_code == status:
                    return last
            except httpx.TransportError:
                pass
            time.sleep(0.1)
    raise AssertionError(f"/health never answered {status} (last {last}):\n{server.log()[-3000:]}")


@pytest.fixture(scope="session")
def tiny_native(tmp_path_factory) -> Path:
    """A copy of the tiny model (native layout), from the cache of tiny models (tiny_cache.py)."""
    return tiny_cache.copy_to(tmp_path_factory.mktemp("tiny-native"), layout="native")


@pytest.fixture(scope="session")
def tiny_official(tmp_path_factory) -> Path:
    return tiny_cache.copy_to(tmp_path_factory.mktemp("tiny-official"), layout="official")


MAIN_ENV = {
    "CONCURRENCY": "16",
    "BATCH_SIZE": "8",
    "BATCH_WAIT_MS": "100",
    "MAX_NEW_TOKENS": "6",
    "MAX_BODY_BYTES": str(2 * 1024 * 1024),
    "MAX_PAGES": "3",
    "LOAD_DELAY_SEC": "3",
    "TIMEOUT_SEC": "120",
    "OCR_REVISION": "rev-main",  # the operator sets it from the pod's revision label
    "BODY_TIMEOUT_SEC": "4",  # the slow-upload test waits this long; a loopback upload takes milliseconds
    "HEADER_TIMEOUT_SEC": "4",  # the slow-head test waits this long; a loopback head takes milliseconds
}


@pytest.fixture(scope="session")
def main_server(tiny_native, tmp_path_factory):
    """The real server with the tiny native model, no API keys. Started once per session.

    It is returned as soon as the port answers (still loading: 503), so the first test can see
    both states; `server` below waits for ready.
    """
    server = start_server(tmp_path_factory.mktemp("main"), {"MODEL_PATH": str(tiny_native), **MAIN_ENV}, wait_ready=False)
    deadline = time.monotonic() + 60
    server.first_health = None
    while server.first_health is None and time.monotonic() < deadline and server.proc.poll() is None:
        try:
            server.first_health = httpx.get(server.url + "/health", timeout=5)
        except httpx.TransportError:
            time.sleep(0.05)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def server(main_server):
    wait_for(main_server, 200)
    return main_server


VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def tiny_vllm_model_dir() -> Path:
    """The --for-vllm tiny model (real vision tower, 0.9 GB), read-only from the cache of tiny
    models (tiny_cache.py: written once per version of its code, a minute on 2 cores)."""
    return tiny_cache.cached(for_vllm=True)


@pytest.fixture(scope="session")
def tiny_vllm() -> Path:
    return tiny_vllm_model_dir()


def start_engine_server(tmp: Path, engine: str, env: dict[str, str], wait_ready: bool = True, timeout: float = 600) -> ServerProcess:
    """A real `python -m ocr_server` for ENGINE=transformers (this venv) or vllm (.venv-vllm)."""
    if engine == "vllm" and not VLLM_PYTHON.is_file():
        pytest.fail(f"{VLLM_PYTHON} is missing: run `make venv-vllm` (make test does)")
    python = str(VLLM_PYTHON) if engine == "vllm" else sys.executable
    return start_server(tmp, {"ENGINE": engine, **env}, wait_ready=wait_ready, timeout=timeout, python=python)
