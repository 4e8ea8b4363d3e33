"""Soak: real server pods under a mixed load for a bounded time, sampled every minute.

    .venv/bin/python bench/soak.py [--duration 3600] [--concurrency 3] [--replicas 2] [--json FILE]
    .venv/bin/python bench/soak.py --url http://SVC:8000 --namespace NS --instance NAME \
        [--kubeconfig PATH] [--api-key KEY] --duration 86400      # an existing OcrService

Without --url it starts the local cluster with its real kubelet node, builds the server image
with the tiny random model (Dockerfile.server), runs the operator as a process and creates one
OcrService of `--replicas` pods on the real node; everything it started is stopped at the end.
With --url it loads an OcrService you run (the guides' 24-hour soak on a GPU cluster) and reads
its pods through the KUBECONFIG you give.

The load, from `--concurrency` client threads until the deadline, each request one of:
- image: a PNG page (a new one each time, so the result cache does not answer) to /v1/ocr;
- pdf: a two-page PDF to /v1/ocr with pages=1-2;
- stream: an OpenAI chat completion with the page as a data: URL and stream=true, read to [DONE];
- bad: an input the server must refuse with a 4xx (corrupt image bytes, a pages bomb, an unknown
  option, an unsupported type);
- cancel: a streamed /v1/ocr request the client closes after the first event.

Every `--interval` seconds (60) it prints and records, per pod, the server process's resident
memory (VmRSS of PID 1, read with `kubectl exec`) and open file descriptors, its restart count, and
for the window: requests by kind and outcome, latency p50/p95/p99 of the answered ones. The JSON
report (`--json`) holds every window and a summary; the run passes (exit 0) when no request got a
5xx or a transport error, every `bad` request got a 4xx and every good one a 200, no pod restarted,
and each pod's RSS grew by less than `--max-rss-growth` (5 %) over the samples after `--warmup`
seconds (300: allocator arenas and caches fill while the first pages of each size arrive),
measured as the median of the last quarter against the median of the first quarter.
`--rejudge FILE` applies the judgement to a saved report again. Every loop is bounded: by the deadline and by per-request timeouts.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
import yaml  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402

KINDS = {"image": 40, "pdf": 15, "stream": 20, "bad": 15, "cancel": 10}  # relative weights
NAME, NAMESPACE, API_KEY = "soak", "soak", "soak-test-key-0001"
MAX_NEW_TOKENS = 16


# --------------------------------------------------------------------------- what is measured

@dataclass(frozen=True)
class Outcome:
    """One request: its kind, what came back (an HTTP status, or 'cancelled' / 'error:<type>')."""

    at: float
    kind: str
    result: str
    seconds: float

    @property
    def failed(self) -> bool:
        """A broken promise: a 5xx, a transport error, a good request not answered 200, a bad one not 4xx."""
        if self.result == "cancelled":
            return False
        if not self.result.isdigit():
            return True
        status = int(self.result)
        return not (400 <= status < 500) if self.kind == "bad" else status != 200


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def window_summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts by kind and result, and latency percentiles of the answered (200) requests."""
    counts: dict[str, dict[str, int]] = {}
    for o in outcomes:
        counts.setdefault(o.kind, {}).setdefault(o.result, 0)
        counts[o.kind][o.result] += 1
    answered = [o.seconds for o in outcomes if o.result == "200"]
    return {"requests": len(outcomes), "failed": sum(o.failed for o in outcomes), "by_kind": counts,
            "fivexx": sum(o.result.isdigit() and int(o.result) >= 500 for o in outcomes),
            "latency_s": {f"p{q}": percentile(answered, q) for q in (50, 95, 99)}}


def rss_growth(samples: list[int]) -> float | None:
    """Growth of the RSS over the steady part of the run, as a fraction: the median of the last
    quarter of the samples against the median of the first quarter.

    Medians of quarters, not the first and last sample: one sample taken while a large page is in
    flight is a transient peak (hundreds of MiB on a CPU), not a leak; a leak moves the whole
    last quarter."""
    if len(samples) < 2:
        return None
    k = max(1, len(samples) // 4)
    first, last = statistics.median(samples[:k]), statistics.median(samples[-k:])
    return (last - first) / first if first > 0 else None


def verdict(summary: dict[str, Any], growth: dict[str, float | None], restarts: dict[str, int],
            max_growth: float) -> list[str]:
    """Why the soak failed; empty when it passed."""
    why = []
    if summary["failed"]:
        why.append(f"{summary['failed']} requests broke a promise (5xx, transport error or wrong status): "
                    f"{summary['by_kind']}")
    if summary["requests"] == 0:
        why.append("no request was sent")
    for pod, g in growth.items():
        if g is None:
            why.append(f"{pod}: too few memory samples to judge growth")
        elif g >= max_growth:
            why.append(f"{pod}: RSS grew {g:.1%} (limit {max_growth:.0%})")
    for pod, n in restarts.items():
        if n:
            why.append(f"{pod}: restarted {n} times during the soak")
    return why


# --------------------------------------------------------------------------- the load

def page_png(rng: random.Random) -> bytes:
    """A small page of random words: new bytes every call, so no cached answer is reused."""
    img = Image.new("RGB", (rng.choice((320, 480, 640)), rng.choice((320, 480, 640))), "white")
    draw = ImageDraw.Draw(img)
    for y in range(10, img.height - 20, 24):
        draw.text((10, y), " ".join(f"w{rng.randrange(10**6)}" for _ in range(5)), fill="black")
    out = io.BytesIO()
    img.save(out, "PNG")
    return out.getvalue()


def two_page_pdf(rng: random.Random) -> bytes:
    pages = [Image.open(io.BytesIO(page_png(rng))) for _ in range(2)]
    out = io.BytesIO()
    pages[0].save(out, "PDF", save_all=True, append_images=pages[1:])
    return out.getvalue()


BAD_INPUTS: tuple[Callable[[random.Random], tuple[dict, dict]], ...] = (
    lambda rng: ({"file": ("page.png", b"\x89PNG\r\n\x1a\n" + rng.randbytes(512), "image/png")}, {}),
    lambda rng: ({"file": ("page.pdf", b"%PDF-1.7\n" + rng.randbytes(256), "application/pdf")}, {}),
    lambda rng: ({"file": ("page.png", page_png(rng), "image/png")}, {"pages": "1-10000," * 2000}),
    lambda rng: ({"file": ("page.png", page_png(rng), "image/png")}, {"no_such_option": "1"}),
    lambda rng: ({"file": ("notes.txt", b"plain text, not a document", "text/plain")}, {}),
)


class Load:
    """`concurrency` client threads sending a seeded mix of requests until the deadline."""

    def __init__(self, base_url: str, api_key: str | None, model: str | None, concurrency: int, seed: int,
                 timeout: float) -> None:
        self.base_url, self.model, self.concurrency, self.seed = base_url, model, concurrency, seed
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()

    def run_until(self, deadline: float) -> list[threading.Thread]:
        if self.model is None:  # the name the server serves, for the chat requests
            with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=30, trust_env=False) as c:
                self.model = c.get("/v1/models").raise_for_status().json()["data"][0]["id"]
        threads = [threading.Thread(target=self._worker, args=(i, deadline), daemon=True)
                   for i in range(self.concurrency)]
        for t in threads:
            t.start()
        return threads

    def _worker(self, index: int, deadline: float) -> None:
        rng = random.Random(self.seed * 1000 + index)
        kinds, weights = zip(*KINDS.items())
        # trust_env=False: the machine's proxy settings must never route a Service address elsewhere.
        with httpx.Client(base_url=self.base_url, headers=self.headers, timeout=self.timeout,
                          trust_env=False) as client:
            while time.monotonic() < deadline:
                kind = rng.choices(kinds, weights)[0]
                t0 = time.monotonic()
                try:
                    result = getattr(self, f"_{kind}")(client, rng)
                except httpx.HTTPError as e:
                    result = f"error:{type(e).__name__}"
                with self.lock:
                    self.outcomes.append(Outcome(time.time(), kind, result, time.monotonic() - t0))

    def _image(self, client: httpx.Client, rng: random.Random) -> str:
        r = client.post("/v1/ocr", files={"file": ("page.png", page_png(rng), "image/png")},
                        data={"prompt_mode": rng.choice(("markdown", "free")), "max_new_tokens": MAX_NEW_TOKENS})
        return str(r.status_code)

    def _pdf(self, client: httpx.Client, rng: random.Random) -> str:
        r = client.post("/v1/ocr", files={"file": ("doc.pdf", two_page_pdf(rng), "application/pdf")},
                        data={"pages": "1-2", "max_new_tokens": MAX_NEW_TOKENS})
        return str(r.status_code)

    def _stream(self, client: httpx.Client, rng: random.Random) -> str:
        url = "data:image/png;base64," + base64.b64encode(page_png(rng)).decode()
        body = {"model": self.model, "stream": True, "max_tokens": MAX_NEW_TOKENS, "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Free OCR."}]}]}
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                return str(r.status_code)
            done = any(line.strip() == "data: [DONE]" for line in r.iter_lines())
            return "200" if done else "error:StreamEndedEarly"

    def _bad(self, client: httpx.Client, rng: random.Random) -> str:
        files, data = rng.choice(BAD_INPUTS)(rng)
        return str(client.post("/v1/ocr", files=files, data=data).status_code)

    def _cancel(self, client: httpx.Client, rng: random.Random) -> str:
        with client.stream("POST", "/v1/ocr", files={"file": ("page.png", page_png(rng), "image/png")},
                           data={"stream": "true", "max_new_tokens": MAX_NEW_TOKENS}) as r:
            if r.status_code != 200:
                r.read()
                return str(r.status_code)
            for _ in r.iter_bytes():
                break  # the first event: then the client goes away mid-answer
        return "cancelled"


# --------------------------------------------------------------------------- the pods

class Pods:
    """The OcrService's server pods, read through kubectl: RSS and open fds of PID 1 (the server)."""

    def __init__(self, kubectl: Callable[..., Any], namespace: str, instance: str) -> None:
        self.kubectl, self.namespace, self.instance = kubectl, namespace, instance

    def list(self) -> list[dict]:
        out = self.kubectl("get", "pods", "-n", self.namespace, "-l", f"app.kubernetes.io/instance={self.instance}",
                           "-o", "json")
        return [p for p in json.loads(out)["items"] if p["status"].get("phase") == "Running"]

    def sample(self) -> tuple[dict[str, dict[str, int]], str | None]:
        """Each running pod's figures, and why a read failed (None when none did).

        A failed read (kubectl timing out on a loaded machine) is a missed sample, not the end of
        the soak: the load goes on and the next window samples again."""
        try:
            return self._read(), None
        except Exception as e:  # noqa: BLE001 - whatever broke the read is reported, the soak goes on
            return {}, f"{type(e).__name__}: {str(e)[:300]}"

    def _read(self) -> dict[str, dict[str, int]]:
        stats = {}
        for pod in self.list():
            name = pod["metadata"]["name"]
            restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
            out = self.kubectl("exec", "-n", self.namespace, name, "-c", "server", "--", "sh", "-c",
                               "grep VmRSS /proc/1/status; ls /proc/1/fd | wc -l")
            lines = out.split("\n")
            stats[name] = {"rss_bytes": int(lines[0].split()[1]) * 1024, "open_fds": int(lines[1]),
                           "restarts": restarts}
        return stats


# --------------------------------------------------------------------------- the run

def soak(load: Load, pods: Pods, duration: float, interval: float, max_growth: float, warmup: float = 0.0,
         log: Callable[[str], None] = print,
         checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    start = time.monotonic()
    deadline = start + duration
    threads = load.run_until(deadline)
    windows: list[dict[str, Any]] = []
    seen = 0
    while True:
        time.sleep(max(0.0, min(interval, deadline - time.monotonic())))
        with load.lock:
            fresh, seen = load.outcomes[seen:], len(load.outcomes)
        sampled, error = pods.sample()
        w = {"minute": round((time.monotonic() - start) / 60, 2), **window_summary(fresh), "pods": sampled}
        if error:
            w["sample_error"] = error
            log(f"[{w['minute']:6.1f} min] the pods could not be read this window: {error}")
        windows.append(w)
        if checkpoint:  # the report so far, so that nothing measured is lost if this process dies
            checkpoint({"duration_s": duration, "windows": windows, "partial": True})
        lat = w["latency_s"]
        log(f"[{w['minute']:6.1f} min] {w['requests']:4d} requests, {w['failed']} failed, {w['fivexx']} 5xx; "
            f"p50 {lat['p50'] or 0:.2f}s p95 {lat['p95'] or 0:.2f}s p99 {lat['p99'] or 0:.2f}s; " +
            "; ".join(f"{p}: rss {s['rss_bytes'] / 2**20:.1f} MiB, fds {s['open_fds']}, restarts {s['restarts']}"
                      for p, s in w["pods"].items()))
        if time.monotonic() >= deadline:
            break
    for t in threads:
        t.join(timeout=load.timeout + 5)
    with load.lock:
        tail = load.outcomes[seen:]
    if tail:  # requests that ended after the last window: counted too
        windows[-1]["after_last_window"] = window_summary(tail)
    report = {"duration_s": duration, "interval_s": interval, "warmup_s": warmup, "concurrency": load.concurrency,
              "windows": windows}
    return {**report, "summary": judge(windows, window_summary(load.outcomes), warmup, max_growth)}


def judge(windows: list[dict[str, Any]], summary: dict[str, Any], warmup: float, max_growth: float) -> dict[str, Any]:
    """The summary with each pod's memory growth, fds and restarts over the run, and the verdict."""
    names = sorted({p for w in windows for p in w["pods"]})
    steady = [w for w in windows if w["minute"] * 60 >= warmup] or windows[-1:]
    rss = {p: [w["pods"][p]["rss_bytes"] for w in steady if p in w["pods"]] for p in names}
    growth = {p: rss_growth(v) for p, v in rss.items()}
    sampled = [w for w in windows if w["pods"]] or windows[:1]
    first, last = sampled[0]["pods"], sampled[-1]["pods"]
    restarts = {p: last.get(p, {}).get("restarts", 0) - first.get(p, {}).get("restarts", 0) for p in names}
    why = verdict(summary, growth, restarts, max_growth)
    if set(first) != set(last):
        why.append(f"the pods changed during the soak: {sorted(first)} at the start, {sorted(last)} at the end")
    missed = sum(1 for w in windows if w.get("sample_error"))
    return {**{k: summary[k] for k in ("requests", "failed", "fivexx", "by_kind", "latency_s")},
            "rss_growth": growth, "rss_min_max_bytes": {p: (min(v), max(v)) for p, v in rss.items() if v},
            "open_fds_first_last": {p: (first.get(p, {}).get("open_fds"), last.get(p, {}).get("open_fds"))
                                    for p in names},
            "restarts": restarts, "missed_samples": missed, "passed": not why, "why_failed": why}


def soak_ocrservice(image: str, replicas: int) -> dict:
    from localcluster.nodeconfig import NODE_SELECTOR, TOLERATION

    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "spec": {"image": image, "imagePullPolicy": "Never", "replicas": replicas,
                     "nodeSelector": dict(NODE_SELECTOR), "tolerations": [dict(TOLERATION)],
                     "resources": {"gpus": 1, "cpu": "100m", "memory": "3Gi"},
                     "auth": {"secretName": "soak-keys", "key": "keys"},
                     "inference": {"maxNewTokens": 64, "timeoutSeconds": 300, "concurrency": 2},
                     "rollout": {"modelLoadTimeoutSeconds": 240, "progressDeadlineSeconds": 300}}}


def local_run(args: argparse.Namespace) -> dict[str, Any]:
    """The local cluster and its real node, an OcrService on it, the soak, then everything stopped."""
    from localcluster.cluster import LocalCluster
    from localcluster.imagebuild import ensure_images
    from localcluster.operator_process import CRD_FILE, OperatorProcess
    from localcluster.waiting import wait_for

    workdir = Path(tempfile.mkdtemp(prefix="causalflow-soak-"))
    cluster = LocalCluster(real_node=True, metric_chain=False)
    cluster.start()
    operator = None
    try:
        print(f"cluster up in {cluster.started_seconds:.0f}s; building/importing the server image", flush=True)
        images = ensure_images(log=lambda line: None, kinds=("server", "server_tiny"))
        if not cluster.has_image(images.server_tiny):
            with images.stream(images.server_tiny) as pipe:
                cluster.import_image(pipe, images.server_tiny)
        cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE))
        cluster.kubectl("create", "namespace", NAMESPACE)
        cluster.kubectl("create", "secret", "generic", "soak-keys", "-n", NAMESPACE, f"--from-literal=keys={API_KEY}")
        operator = OperatorProcess(cluster.operator_kubeconfig, [NAMESPACE], workdir / "operator.log").start()
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(soak_ocrservice(images.server_tiny, args.replicas)))

        def ready() -> bool:
            obj = json.loads(cluster.kubectl("get", "ocrs", NAME, "-n", NAMESPACE, "-o", "json").stdout)
            return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))

        wait_for(ready, timeout=420, interval=2, message=f"OcrService {NAME} Ready (operator log: {operator.log_path})")
        svc = json.loads(cluster.kubectl("get", "service", NAME, "-n", NAMESPACE, "-o", "json").stdout)
        url = f"http://{svc['spec']['clusterIP']}:{svc['spec']['ports'][0]['port']}"
        print(f"OcrService {NAME} Ready with {args.replicas} pods; soaking {url} for {args.duration:.0f}s", flush=True)
        pods = Pods(lambda *a: cluster.kubectl(*a).stdout, NAMESPACE, NAME)
        load = Load(url, API_KEY, args.model, args.concurrency, args.seed, args.request_timeout)
        report = soak(load, pods, args.duration, args.interval, args.max_rss_growth, args.warmup,
                      checkpoint=checkpointer(args.json))
        report["image"] = images.server_tiny
        return report
    finally:
        if operator is not None:
            operator.stop()
        cluster.stop()


def remote_run(args: argparse.Namespace) -> dict[str, Any]:
    import subprocess

    def kubectl(*a: str) -> str:
        argv = ["kubectl", *(["--kubeconfig", args.kubeconfig] if args.kubeconfig else []), *a]
        return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout

    load = Load(args.url, args.api_key, args.model, args.concurrency, args.seed, args.request_timeout)
    return soak(load, Pods(kubectl, args.namespace, args.instance), args.duration, args.interval, args.max_rss_growth,
                args.warmup, checkpoint=checkpointer(args.json))


def checkpointer(path: Path | None) -> Callable[[dict[str, Any]], None] | None:
    return (lambda report: path.write_text(json.dumps(report, indent=2))) if path else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=3600, help="seconds of load (default 3600)")
    p.add_argument("--interval", type=float, default=60, help="seconds between samples (default 60)")
    p.add_argument("--concurrency", type=int, default=3, help="client threads (default 3)")
    p.add_argument("--replicas", type=int, default=2, help="server pods of the local OcrService (default 2)")
    p.add_argument("--request-timeout", type=float, default=300, help="per-request client timeout, seconds")
    p.add_argument("--warmup", type=float, default=300,
                   help="seconds before the RSS baseline sample (default 300; 0: the first sample)")
    p.add_argument("--max-rss-growth", type=float, default=0.05, help="fraction (default 0.05)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--model", help="the served model name for chat requests (default: the first of GET /v1/models)")
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--url", help="an existing OcrService's base URL; with --namespace and --instance")
    p.add_argument("--namespace", default=NAMESPACE)
    p.add_argument("--instance", default=NAME, help="the OcrService's name (its pods' instance label)")
    p.add_argument("--kubeconfig")
    p.add_argument("--api-key")
    p.add_argument("--rejudge", type=Path, help="judge a saved --json report again (with --warmup, --max-rss-growth)")
    args = p.parse_args(argv)
    if args.rejudge:
        saved = json.loads(args.rejudge.read_text())
        report = {**saved, "warmup_s": args.warmup,
                  "summary": judge(saved["windows"], saved["summary"], args.warmup, args.max_rss_growth)}
        return finish(report, args.json)
    if args.duration <= 0 or args.interval <= 0 or not 0 <= args.warmup < args.duration or not 1 <= args.concurrency <= 256:
        p.error("--duration and --interval must be positive, 0 <= --warmup < --duration, --concurrency 1..256")
    return finish(remote_run(args) if args.url else local_run(args), args.json)


def finish(report: dict[str, Any], json_path: Path | None) -> int:
    s = report["summary"]
    print(json.dumps({k: s[k] for k in ("requests", "failed", "fivexx", "latency_s", "rss_growth", "rss_min_max_bytes",
                                        "open_fds_first_last",
                                        "restarts", "passed", "why_failed")}, indent=2))
    if json_path:
        json_path.write_text(json.dumps(report, indent=2))
    return 0 if s["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
