"""The demo's plumbing: its narration, waits, child processes, and kubectl and HTTP helpers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BOLD, DIM, GREEN, YELLOW, RED, CYAN, RESET = (
    ("\033[1m", "\033[2m", "\033[32m", "\033[33m", "\033[31m", "\033[36m", "\033[0m")
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR") else ("",) * 7
)


class DemoError(RuntimeError):
    """A step did not finish; the message says which and where its log is."""


# --------------------------------------------------------------------------- output

class Narrator:
    def __init__(self, total: int) -> None:
        self.total, self.n, self.t0 = total, 0, time.monotonic()
        self.step_t0 = self.t0

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.t0:5.1f}s"

    def step(self, title: str, *explain: str) -> None:
        self.n += 1
        self.step_t0 = time.monotonic()
        print(f"\n{BOLD}{CYAN}[{self.n}/{self.total}] {title}{RESET}  {DIM}({self.elapsed()}){RESET}", flush=True)
        for line in explain:
            print(f"  {line}")

    def say(self, line: str) -> None:
        print(f"  {line}", flush=True)

    def ok(self, line: str) -> None:
        took = time.monotonic() - self.step_t0
        print(f"  {GREEN}✓{RESET} {line} {DIM}[{took:.1f}s]{RESET}", flush=True)

    def note(self, line: str) -> None:
        print(f"  {YELLOW}!{RESET} {line}", flush=True)

    def table(self, text: str, title: str | None = None) -> None:
        if title:
            print(f"  {DIM}$ {title}{RESET}")
        for line in text.rstrip().splitlines():
            print(f"    {line}")
        sys.stdout.flush()


def wait(predicate, timeout: float, what: str, interval: float = 0.5, log: Path | None = None):
    """Poll until predicate() is truthy; raise DemoError naming `what` (and a log) on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except DemoError:
            raise
        except Exception as e:  # noqa: BLE001 - a transient error is just "not yet"
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(interval)
    hint = f"; see {log}" if log else ""
    raise DemoError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r}){hint}")


# --------------------------------------------------------------------------- processes

class Processes:
    """Child processes the demo started; stopped by PID, newest first."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, cwd=ROOT, start_new_session=True)
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 10) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self) -> list[str]:
        stopped = []
        for name, proc in reversed(list(self.procs)):
            self.stop(proc)
            stopped.append(f"{name} (pid {proc.pid})")
        return stopped


# --------------------------------------------------------------------------- kube helpers

def kubectl(cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    proc = cluster.kubectl(*args, input=input, check=False)
    if check and proc.returncode != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def get_json(cluster, *args: str) -> dict:
    return json.loads(kubectl(cluster, "get", *args, "-o", "json"))


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c.get("type") == kind), {})


def ocrs_line(obj: dict) -> str:
    st = obj.get("status", {})
    ready = condition(obj, "Ready")
    phase = (st.get("rollout") or {}).get("phase", "-")
    gate = f"  gate {st['qualityGate'].get('phase', '-')}" if st.get("qualityGate") else ""
    return (f"Ready={ready.get('status', '-')} ({ready.get('reason', '-')})  "
            f"replicas {st.get('replicaSummary', '-')}  revision {st.get('currentRevision', '-')}  rollout {phase}{gate}")


def merged(base: dict, extra: dict) -> dict:
    """`base` with `extra` merged in, nested mappings key by key."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def http_json(url: str, timeout: float = 5, data: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(url, data=data, headers=headers or {})
    # No proxy: the machine's proxy settings must not route a Service address anywhere else.
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=timeout) as resp:
        return resp.status, json.loads(resp.read() or b"null")


def multipart(field: str, filename: str, payload: bytes, content_type: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"{filename}\"\r\n"
            f"Content-Type: {content_type}\r\n\r\n").encode() + payload + f"\r\n--{boundary}--\r\n".encode()
    return body, f"multipart/form-data; boundary={boundary}"


def summarize(result) -> str:
    """The interesting parts of an OCR response, one line each (unknown shapes fall back to JSON)."""
    if not isinstance(result, dict):
        return json.dumps(result)[:400]
    lines = []
    model = result.get("model")
    if isinstance(model, dict):
        lines.append(f"model:   {model.get('name')}  (revision {model.get('revision')})")
    layout = result.get("layout") or {}
    if layout:
        w, h = (layout.get("image_size") or ["?", "?"])[:2]
        g = "x".join(map(str, layout.get("global_view") or []))
        c = "x".join(map(str, layout.get("crop_size") or []))
        grid = "x".join(map(str, layout.get("crop_grid") or []))
        lines.append(f"layout:  image {w}x{h} -> global view {g} + {layout.get('crops')} crops of {c} "
                     f"(grid {grid}) = {layout.get('visual_tokens')} visual tokens")
    usage = result.get("usage") or {}
    if usage:
        lines.append(f"usage:   {usage.get('visual_tokens')} visual tokens, {usage.get('generated_tokens')} "
                     f"generated tokens, {usage.get('pages')} page(s)")
    timings = result.get("timings") or {}
    if timings:
        lines.append("timings: " + ", ".join(f"{k.removesuffix('_ms')} {v:.0f} ms" for k, v in timings.items()
                                              if isinstance(v, (int, float))))
    lines.append(f"blocks:  {len(result.get('blocks') or [])} parsed blocks with pixel boxes "
                 f"(the random text contains no layout markup)")
    text = result.get("text") or ""
    lines.append(f"text:    {json.dumps(text[:90], ensure_ascii=False)}...  <- random weights: MEANINGLESS")
    if result.get("notice"):
        lines.append(f"notice:  {result['notice']}")
    return "\n".join(lines)
