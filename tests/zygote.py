"""Test servers and operators forked from one process that has already imported what they import:
`python -m ocr_server` without paying torch's and transformers' import at every start, and
`python -m ocr_operator` without kopf's and the Kubernetes clients'. The server's zygote also
forks the stand-in server (`python -m ocr_server_testing.stand_in`), whose imports are the
server's (`FORKS`).

A server start spends most of its CPU importing (about 13 s on 2 cores: torch 7 s, transformers'
DeepSeek-OCR 2 modeling with sympy and torch._dynamo 6 s) before it reads a byte of its model; an
operator start about 1.4 s (kopf, which imports the kubernetes client, lightkube, aiohttp) of its
1.9; the suite starts dozens of servers and about 90 operators. A zygote (`python -m tests.zygote
MODULE`, one per module per test process, started on first use by `Zygote.get()`) imports what
`python -m MODULE` imports (`PRELOAD`), then forks one child per request. The child takes the
request's environment, arguments, working directory and log file, and runs MODULE as `__main__`
exactly as `python -m MODULE` does: the same main(), config, signals and exit codes. The process
under test is a real server (operator) process; only the imports it would redo are inherited. The
operator's zygote imports third-party packages only: the operator's own modules, which read
settings, are imported by each child.

Lifetimes: the zygote dies with its test process, a child with the zygote (parent-death signals),
so a killed test run leaves no server behind. The zygote reaps its children and writes each one's
exit status (as Popen's returncode: -N for signal N) to a file the test reads (`Forked`).

Protocol on the zygote's stdin/stdout: one JSON line per request, {"env", "argv", "cwd", "log",
"status", "module"}; the answer is one line, {"pid"}.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import random
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
# CAUSALFLOW_TEST_FORK=0: every test server and operator execs `python -m MODULE` afresh.
FORK_ENV = "CAUSALFLOW_TEST_FORK"
# Variables read when torch, transformers or Python start (thread pools, kernels, offline hubs): a
# server whose environment sets one of them otherwise than the zygote's is started afresh instead.
IMPORT_TIME = ("OMP_", "MKL_", "KMP_", "GOMP_", "TORCH", "PYTORCH", "TRANSFORMERS", "HF_", "PYTHON", "LD_",
               "CUDA", "VLLM", "TOKENIZERS", "MALLOC")
# ... except those torch writes into a test process's own environment as it runs: inductor's
# cache_dir() stores its default there once anything in the process compiled (the slots tests'
# flex attention), after which every server that process started was started afresh (6 of them in
# the server tier, 4 CPU s each). Read when compiling, not when importing.
WRITTEN_AT_RUN_TIME = frozenset({"TORCHINDUCTOR_CACHE_DIR"})
# What `python -m MODULE` imports before it serves: for the server, transformers' lazy modules
# included (the model, processor and tokenizer classes its engine creates, with sympy, triton and
# the hub kernels); for the operator, kopf and the clients (kopf imports the kubernetes package).
PRELOAD = {"ocr_server": ("torch", "transformers", "ocr_server.engines.transformers.engine", "ocr_server.engines.factory",
           "ocr_server.http.app", "ocr_server.http.server", "ocr_server.runtime.config", "uvicorn", "fastapi",
           "transformers.models.deepseek_ocr2.modeling_deepseek_ocr2", "transformers.models.auto.modeling_auto",
           "transformers.models.auto.processing_auto", "transformers.models.auto.tokenization_auto",
           "transformers.models.auto.image_processing_auto", "transformers.integrations.sdpa_attention",
           "transformers.integrations.flex_attention", "transformers.integrations.hub_kernels", "tokenizers",
           "safetensors.torch"),
           "ocr_operator": ("kopf", "kubernetes", "lightkube", "aiohttp", "pydantic", "yaml", "prometheus_client")}
# The modules a zygote runs besides its own: their imports are a subset of its PRELOAD.
FORKS = {"ocr_server": frozenset({"ocr_server", "ocr_server_testing.stand_in"}),
         "ocr_operator": frozenset({"ocr_operator"})}


def enabled() -> bool:
    return os.environ.get(FORK_ENV, "1") != "0"


def die_with_parent() -> None:
    """In a child (before exec, or after fork): the kernel sends it SIGTERM when its parent dies, so
    a killed or crashed test run leaves no server behind (its shutdown then stops vLLM's workers)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _child(zygote_module: str, request: dict, zygote: int) -> None:
    """In the forked child: become `python -m MODULE` (the request's, else the zygote's) with the
    request's environment. Never returns."""
    code = 1
    module = request.get("module") or zygote_module
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        die_with_parent()
        if os.getppid() != zygote:  # the zygote died between fork and prctl
            os._exit(1)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # gettempdir() reads the request's TMPDIR, not the zygote's cached one
        random.seed()  # not the zygote's sequence, shared by every child
        sys.argv = [f"-m {module}", *request.get("argv", ())]
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child's traceback goes to its log, then it ends
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def _reap(statuses: dict[int, str]) -> None:
    while statuses:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        path = statuses.pop(pid, None)
        if path is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            Path(path + ".tmp").write_text(str(code))
            os.rename(path + ".tmp", path)


def main() -> int:
    module = sys.argv[1] if len(sys.argv) > 1 else "ocr_server"
    die_with_parent()
    __import__("numpy")  # its OpenBLAS starts a thread pool, which handles fork (pthread_atfork)

    blas = len(os.listdir("/proc/self/task"))
    gc.disable()  # as the server starts (ocr_server/runtime/gcpause.py): imports make almost no cycles
    for name in PRELOAD[module]:
        __import__(name)
    gc.collect()
    gc.enable()
    threads = len(os.listdir("/proc/self/task"))
    if threads != blas:  # a fork copies one thread: any other pool an import started would hang its children
        print(json.dumps({"error": f"the zygote's imports started {threads - blas} thread(s) besides OpenBLAS's: "
                                   f"it cannot fork {module} safely"}), flush=True)
        return 1
    zygote = os.getpid()
    statuses: dict[int, str] = {}
    print(json.dumps({"ready": zygote}), flush=True)
    buffered = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.1)
        _reap(statuses)
        if not readable:
            continue
        chunk = os.read(0, 65536)
        if not chunk:  # the test process closed the pipe: its servers end with this process
            return 0
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(module, request, zygote)
            statuses[pid] = request["status"]
            print(json.dumps({"pid": pid}), flush=True)


class Forked:
    """A forked server as the tests use a subprocess.Popen: pid, poll, wait, send_signal,
    terminate, kill, returncode. Its exit is seen on a pidfd; its status is the zygote's file."""

    def __init__(self, pid: int, status: Path) -> None:
        self.pid, self.status_path = pid, status
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    def _status(self) -> int:
        deadline = time.monotonic() + 5  # the zygote reaps within 0.1 s
        while not self.status_path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the zygote wrote no exit status for pid {self.pid}")
            time.sleep(0.01)
        return int(self.status_path.read_text())

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = self._status()
            os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            signal.pidfd_send_signal(self._pidfd, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """This test process's zygote of one module, started on first use (a start's imports, once)."""

    _ones: "dict[str, Zygote]" = {}
    _lock = threading.Lock()  # guards _ones; each zygote's requests have their own

    def __init__(self, root: Path, module: str = "ocr_server") -> None:
        self.module = module
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", "DEVICE": "cpu"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.zygote", module], cwd=root, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=die_with_parent)
        line = self.proc.stdout.readline()
        if not line or "error" in json.loads(line):
            raise RuntimeError(f"the {module} zygote is not ready: {line.decode().strip() or 'it ended'}")
        self.count = 0
        self._requests = threading.Lock()  # one request and its answer at a time on the pipe

    def compatible(self, env: dict[str, str]) -> bool:
        """Whether a server with `env` may be forked: every import-time variable as the zygote has it."""
        names = {k for k in (*env, *self.env) if k.startswith(IMPORT_TIME) and k not in WRITTEN_AT_RUN_TIME}
        return all(env.get(k) == self.env.get(k) for k in names)

    @classmethod
    def get(cls, root: Path, module: str = "ocr_server") -> "Zygote":
        with cls._lock:
            one = cls._ones.get(module)
            if one is None or one.proc.poll() is not None:
                one = cls._ones[module] = cls(root, module)
            return one

    def fork(self, env: dict[str, str], cwd: Path, log: Path, argv: list[str] | tuple[str, ...] = (),
             module: str | None = None) -> Forked:
        """`python -m MODULE ARGV` (default: the zygote's module; one of its FORKS) as a forked child."""
        module = module or self.module
        if module not in FORKS[self.module]:
            raise ValueError(f"the {self.module} zygote does not run {module}")
        with self._requests:
            self.count += 1
            status = log.with_name(f"{log.name}.exit-{self.count}")
            request = {"env": env, "argv": list(argv), "cwd": str(cwd), "log": str(log), "status": str(status),
                       "module": module}
            # As with Popen's stdout=open(log): the log exists once the start returns (the child
            # opens it a moment later; a test on a busy machine read it first and failed).
            log.touch()
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline())
        return Forked(answer["pid"], status)


if __name__ == "__main__":
    raise SystemExit(main())
