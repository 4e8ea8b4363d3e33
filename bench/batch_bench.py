"""The OcrBatch worker against a plain client loop, and interactive latency with and without a batch,
in one run on the same pages.

    .venv/bin/python bench/batch_bench.py [--pages 160] [--parallelism 2] [--concurrency 4] [--json FILE]
    .venv/bin/python bench/batch_bench.py --model-path DIR --device cuda --new-tokens 256 --pages 512

One server (`python -m ocr_server` with its production defaults: CONCURRENCY 4, BATCH_SIZE 8, the
slots decoder; the result cache off, so every page is computed) loads the tiny random model unless
--model-path names real weights. --pages PNG pages go into a folder, and four loads run on the
server one after the other:

1. alone: --probes interactive requests, one at a time, with nothing else running;
2. loop: a plain client (httpx, asyncio) sends every page to /v1/ocr, parallelism x concurrency at
   once, as a user's own script would, marked `X-Request-Class: batch` like the worker's pages (the
   server keeps the same slots from both, so the two differ only by the worker);
3. batch: the OcrBatch worker (`python -m ocr_batch_worker`, one process per index, as the Job's
   pods run it) over the same folder into an empty output, timed from the first worker's start to
   the last one's exit (start-up and result writing included);
4. during: the batch again into another empty output, with the interactive probes sent one at a
   time while it runs.

Verdict (exit 0 when both hold): the batch's pages/s is at least --min-throughput (0.95) of the
loop's, and the interactive p95 during the batch is at most --max-p95-ratio (1.5) of alone. The
figures measure the serving path (admission, request classes, the worker), not OCR quality. Every
load is bounded: by its page count and by per-request and per-run timeouts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402 (the repository is put on the path just above)

from bench.server_bench import page  # noqa: E402
from localcluster.ports import free_port  # noqa: E402

RUN_TIMEOUT = 1800  # seconds any one load may take
REQUEST_TIMEOUT = 600


def figures(latencies: list[float]) -> dict[str, float]:
    """Median and 95th percentile (nearest rank) of the latencies, in seconds."""
    p95 = sorted(latencies)[math.ceil(0.95 * len(latencies)) - 1]
    return {"p50_s": round(statistics.median(latencies), 4), "p95_s": round(p95, 4), "n": len(latencies)}


def probe_figures(answers: list[tuple[float, dict]]) -> dict[str, Any]:
    """figures() of the probes, with the medians of the server's own timings (where the time went)."""
    keys = ("queue_ms", "preprocess_ms", "generate_ms")
    return {**figures([seconds for seconds, _ in answers]),
            "server_p50_ms": {k: round(statistics.median(t[k] for _, t in answers), 1) for k in keys}}


def verdict(report: dict[str, Any], min_throughput: float, max_p95_ratio: float) -> dict[str, Any]:
    """The two promises, from the measured figures (pure)."""
    throughput = report["batch"]["pages_per_s"] / report["loop"]["pages_per_s"]
    p95_ratio = report["during"]["p95_s"] / report["alone"]["p95_s"]
    why = []
    if throughput < min_throughput:
        why.append(f"batch pages/s {throughput:.3f}x the loop's (< {min_throughput})")
    if p95_ratio > max_p95_ratio:
        why.append(f"interactive p95 during the batch {p95_ratio:.3f}x alone (> {max_p95_ratio})")
    return {"batch_over_loop": round(throughput, 3), "p95_during_over_alone": round(p95_ratio, 3),
            "passed": not why, "why_failed": why}


class Server:
    """`python -m ocr_server` on a free loopback port, stopped on exit."""

    def __init__(self, model: Path, args: argparse.Namespace, log: Path) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        env = {**os.environ, "MODEL_PATH": str(model), "DEVICE": args.device, "HOST": "127.0.0.1",
               "PORT": self.url.rsplit(":", 1)[1], "MAX_NEW_TOKENS": str(args.new_tokens), "CACHE_ENTRIES": "0",
               "TIMEOUT_SEC": "300", "PYTHONUNBUFFERED": "1"}
        for key in ("API_KEYS", "CONFIG_FILE"):
            env.pop(key, None)
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "ocr_server"], env=env, cwd=ROOT,
                                     stdout=log.open("wb"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                r = httpx.get(self.url + "/health", timeout=5)
                if r.status_code == 200:
                    return r.json()
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"server not ready in {timeout:.0f}s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def post_page(client: httpx.Client, data: bytes, new_tokens: int) -> tuple[float, dict]:
    """One interactive page: (seconds, the server's own timings of it)."""
    t = time.perf_counter()
    r = client.post("/v1/ocr", files={"file": ("p.png", data, "image/png")}, data={"max_new_tokens": str(new_tokens)})
    r.raise_for_status()
    return time.perf_counter() - t, r.json()["timings"]


def probes(url: str, count: int, new_tokens: int, until: threading.Event | None = None,
           gap: float = 0.1) -> list[tuple[float, dict]]:
    """Interactive requests one at a time (a person at a time): `count` of them, or fewer once `until`
    is set after at least one. Each probe is a new page, so nothing is answered from a cache."""
    out: list[tuple[float, dict]] = []
    with httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT) as c:
        for i in range(count):
            if until is not None and until.is_set() and out:
                break
            out.append(post_page(c, page(300 + i % 7, 220, seed=90_000 + i), new_tokens))
            time.sleep(gap)
    return out


def batch_answered(url: str) -> float:
    """Batch-class requests the server has answered 200 (its own /metrics)."""
    total = 0.0
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("ocr_requests_total{") and 'class="batch"' in line and 'status="200"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def client_loop(url: str, pages: list[Path], concurrency: int, new_tokens: int) -> float:
    """A plain script's loop: every page to /v1/ocr, `concurrency` at once; the wall seconds."""
    async def run() -> None:
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT) as c:
            async def one(path: Path) -> None:
                async with gate:
                    r = await c.post("/v1/ocr", files={"file": (path.name, path.read_bytes(), "image/png")},
                                     data={"max_new_tokens": str(new_tokens)}, headers={"X-Request-Class": "batch"})
                    r.raise_for_status()
            await asyncio.gather(*(one(p) for p in pages))

    t0 = time.perf_counter()
    asyncio.run(asyncio.wait_for(run(), RUN_TIMEOUT))
    return time.perf_counter() - t0


def run_batch(url: str, folder: Path, out: Path, args: argparse.Namespace) -> float:
    """Every index of the batch as its own worker process, side by side; the wall seconds."""
    config = {"serviceUrl": url, "input": {"pvc": {"path": str(folder)}}, "output": {"pvc": {"path": str(out)}},
              "options": {"mode": "free", "maxNewTokens": args.new_tokens}, "parallelism": args.parallelism,
              "concurrencyPerWorker": args.concurrency, "progressIntervalSeconds": 5}
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              env={**os.environ, "BATCH_CONFIG": json.dumps(config), "JOB_COMPLETION_INDEX": str(i)})
             for i in range(args.parallelism)]
    for p in procs:
        log, _ = p.communicate(timeout=RUN_TIMEOUT)
        if p.returncode != 0:
            raise SystemExit(f"worker exited {p.returncode}:\n{log.decode(errors='replace')[-3000:]}")
    wall = time.perf_counter() - t0
    done = sum(json.loads((out / "progress" / f"index-{i:05d}.json").read_text())["pages_done"]
               for i in range(args.parallelism))
    if done != len(list(folder.iterdir())):
        raise SystemExit(f"the batch did {done} pages of {len(list(folder.iterdir()))}")
    return wall


def bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    if args.model_path:
        model = args.model_path
    else:
        from ocr_server_testing.tiny_model import write_tiny_model
        model = write_tiny_model(work / "tiny", layout="native")
    folder = work / "in"
    folder.mkdir()
    for i in range(args.pages):
        (folder / f"p{i:05d}.png").write_bytes(page(320 + i % 16, 240, seed=i))
    pages = sorted(folder.iterdir())
    server = Server(model, args, work / "server.log")
    try:
        health = server.wait_ready()
        probes(server.url, 3, args.new_tokens)  # warm: the first requests of each shape build caches
        report: dict[str, Any] = {"health": {k: health.get(k) for k in ("engine", "device", "decoder") if k in health}}
        report["alone"] = probe_figures(probes(server.url, args.probes, args.new_tokens))
        print(f"alone: {report['alone']}", file=sys.stderr, flush=True)
        in_flight = args.parallelism * args.concurrency
        wall = client_loop(server.url, pages, in_flight, args.new_tokens)
        report["loop"] = {"seconds": round(wall, 2), "pages_per_s": round(len(pages) / wall, 3), "in_flight": in_flight}
        print(f"loop: {report['loop']}", file=sys.stderr, flush=True)
        wall = run_batch(server.url, folder, work / "out-1", args)
        report["batch"] = {"seconds": round(wall, 2), "pages_per_s": round(len(pages) / wall, 3), "in_flight": in_flight}
        print(f"batch: {report['batch']}", file=sys.stderr, flush=True)
        # The probes start once the batch's first page is answered (the workers have started) and stop
        # when it ends: every one of them is sent during the batch.
        finished = threading.Event()
        during: list[tuple[float, dict]] = []

        def probe_during() -> None:
            base, deadline = batch_answered(server.url), time.monotonic() + RUN_TIMEOUT
            while batch_answered(server.url) == base and not finished.is_set() and time.monotonic() < deadline:
                time.sleep(0.05)
            during.extend(probes(server.url, args.probes, args.new_tokens, until=finished))

        prober = threading.Thread(target=probe_during, daemon=True)
        prober.start()
        try:
            run_batch(server.url, folder, work / "out-2", args)
        finally:
            finished.set()
            prober.join(REQUEST_TIMEOUT)
        report["during"] = probe_figures(during)
        print(f"during: {report['during']}", file=sys.stderr, flush=True)
        report["settings"] = {k: getattr(args, k) for k in ("pages", "parallelism", "concurrency", "probes",
                                                            "new_tokens", "device")}
        report["verdict"] = verdict(report, args.min_throughput, args.max_p95_ratio)
        return report
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pages", type=int, default=160, help="pages in the batch (1..10000; default 160)")
    p.add_argument("--parallelism", type=int, default=2, help="worker processes, as spec.parallelism (default 2)")
    p.add_argument("--concurrency", type=int, default=4, help="pages in flight per worker (default 4)")
    p.add_argument("--probes", type=int, default=40, help="interactive requests per phase (default 40)")
    p.add_argument("--new-tokens", type=int, default=2, help="new tokens per page (default 2)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--model-path", type=Path, help="weights to serve (default: the tiny random model)")
    p.add_argument("--min-throughput", type=float, default=0.95)
    p.add_argument("--max-p95-ratio", type=float, default=1.5)
    p.add_argument("--json", type=Path, help="write the report here")
    args = p.parse_args(argv)
    if not (1 <= args.pages <= 10_000 and 1 <= args.parallelism <= 64 and 1 <= args.concurrency <= 64
            and 5 <= args.probes <= 1000 and 1 <= args.new_tokens <= 8192):
        p.error("--pages 1..10000, --parallelism 1..64, --concurrency 1..64, --probes 5..1000, --new-tokens 1..8192")
    with tempfile.TemporaryDirectory(prefix="causalflow-batch-bench-") as work:
        report = bench(args, Path(work))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
