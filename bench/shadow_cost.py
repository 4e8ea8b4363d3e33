"""What shadow pages add to a client's answer: the time from the service's answer being ready to its
last byte handed to the connection (ocr_answer_send_seconds), mirrored or not.

    .venv/bin/python bench/shadow_cost.py --json shadow.json

One run: two tiny-model server processes on 127.0.0.1 (the serving one with a gate key file and
POD_IP=127.0.0.1, as the operator sets them; the candidate with the same weights and key), --requests
sequential client requests with shadow pages disarmed, then as many with the serving one armed at
100 % to the candidate (every answer copied after it is sent; the first noisePages also replayed).
Each request's own send time is read back exactly from /metrics: the growth of the histogram's _sum
(and _count by one) across that one request. The result cache is off and every page differs.
Reports the mean and p95 of each, the difference, and whether it is under the goal (5 ms per
mirrored request). Random weights: the figures measure serving, not OCR quality.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from server_bench import page  # noqa: E402  (bench/ and the repository are put on the path just above)

from localcluster.ports import free_port  # noqa: E402

GOAL_MS = 5.0
GATE_KEY = "gk-shadow-bench-0001"
GATE = {"Authorization": f"Bearer {GATE_KEY}"}


def send_seconds(metrics: str, shadow: str) -> tuple[float, float]:
    """(_sum, _count) of ocr_answer_send_seconds{shadow=...} in a /metrics text."""
    def value(series: str) -> float:
        m = re.search(rf'^ocr_answer_send_seconds_{series}{{shadow="{shadow}"}} (\S+)$', metrics, re.M)
        if m is None:
            raise SystemExit(f"no ocr_answer_send_seconds_{series}{{shadow={shadow}}} on /metrics")
        return float(m.group(1))

    return value("sum"), value("count")


def summary(seconds: list[float]) -> dict[str, float]:
    """Mean, p95 (nearest rank) and max, in milliseconds."""
    ordered = sorted(seconds)
    p95 = ordered[max(0, -(-95 * len(ordered) // 100) - 1)]
    return {"mean_ms": round(statistics.fmean(ordered) * 1000, 3), "p95_ms": round(p95 * 1000, 3),
            "max_ms": round(ordered[-1] * 1000, 3)}


def start(model: Path, key_file: Path, new_tokens: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "MODEL_PATH": str(model), "DEVICE": "cpu", "WARMUP": "0", "CACHE_ENTRIES": "0",
           "MAX_NEW_TOKENS": str(new_tokens), "HOST": "127.0.0.1", "PORT": str(port), "PYTHONUNBUFFERED": "1",
           "GATE_KEY_FILE": str(key_file), "POD_IP": "127.0.0.1"}
    for key in ("API_KEYS", "API_KEYS_FILE", "CONFIG_FILE"):
        env.pop(key, None)
    proc = subprocess.Popen([sys.executable, "-m", "ocr_server"], env=env, cwd=ROOT, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server not ready after 300 s:\n{log.read_text()[-3000:]}")


def requests(client: httpx.Client, shadow: str, count: int, first_seed: int, size: int) -> tuple[list[float], list[float]]:
    """`count` sequential requests: each one's send time (from /metrics) and its client-side time."""
    sends, totals = [], []
    before = send_seconds(client.get("/metrics").text, shadow)
    for i in range(count):
        body = {"image": base64.b64encode(page(size, size, seed=first_seed + i)).decode(), "prompt_mode": "free"}
        t0 = time.perf_counter()
        answer = client.post("/v1/ocr", json=body)
        totals.append(time.perf_counter() - t0)
        if answer.status_code != 200:
            raise SystemExit(f"request {i} failed: {answer.status_code} {answer.text[:500]}")
        after = send_seconds(client.get("/metrics").text, shadow)
        if after[1] != before[1] + 1:
            raise SystemExit(f"request {i} was not observed once under shadow={shadow}: {before} -> {after}")
        sends.append(after[0] - before[0])
        before = after
    return sends, totals


def run(model: Path, tmp: Path, count: int, size: int, new_tokens: int, noise_pages: int) -> dict:
    key_file = tmp / "gate-keys"
    key_file.write_text(GATE_KEY + "\n")
    serving, serving_url = start(model, key_file, new_tokens, tmp / "serving.log")
    try:
        candidate, candidate_url = start(model, key_file, new_tokens, tmp / "candidate.log")
        try:
            with httpx.Client(base_url=serving_url, timeout=600) as c:
                plain, plain_total = requests(c, "none", count, 5000, size)
                armed = c.put("/v1/shadow", headers=GATE, json={
                    "id": "bench", "target": candidate_url, "samplePercent": 100, "maxPages": min(count, 256),
                    "maxSeconds": 3600, "noisePages": noise_pages, "timeoutSeconds": 600})
                if armed.status_code != 200:
                    raise SystemExit(f"arming failed: {armed.status_code} {armed.text[:500]}")
                mirrored, mirrored_total = requests(c, "sampled", count, 6000, size)
                deadline = time.monotonic() + 600
                while c.get("/v1/shadow", headers=GATE).json()["pending"] and time.monotonic() < deadline:
                    time.sleep(0.2)
                final = c.delete("/v1/shadow", headers=GATE).json()
        finally:
            candidate.terminate()
            candidate.wait(20)
    finally:
        serving.terminate()
        serving.wait(20)
    none, sampled = summary(plain), summary(mirrored)
    judged = [p["distance"] for p in final["pages"] if p["distance"] is not None]
    return {
        "requests": count, "page_px": size, "new_tokens": new_tokens, "noise_pages": noise_pages,
        "send": {"none": none, "sampled": sampled},
        "added_mean_ms": round(sampled["mean_ms"] - none["mean_ms"], 3),
        "added_p95_ms": round(sampled["p95_ms"] - none["p95_ms"], 3),
        "goal_ms": GOAL_MS, "under_goal": sampled["mean_ms"] - none["mean_ms"] < GOAL_MS,
        "client_mean_ms": {"none": round(statistics.fmean(plain_total) * 1000, 1),
                           "sampled": round(statistics.fmean(mirrored_total) * 1000, 1)},
        "copies": {"sampled": final["sampled"], "judged": len(judged), "errors": len(final["pages"]) - len(judged),
                   "worst_distance": max(judged, default=None), "noise": [n["distance"] for n in final["noise"]]},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=40, help="per phase (disarmed, then armed)")
    ap.add_argument("--size", type=int, default=640, help="page side in pixels")
    ap.add_argument("--new-tokens", type=int, default=8)
    ap.add_argument("--noise-pages", type=int, default=2)
    ap.add_argument("--model-dir", type=Path, help="reuse or keep the tiny model here")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model_dir or Path(tmp) / "model"
        if not (model / "config.json").is_file():
            from ocr_server_testing.tiny_model import write_tiny_model

            write_tiny_model(model)
        figures = run(model, Path(tmp), args.requests, args.size, args.new_tokens, args.noise_pages)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
