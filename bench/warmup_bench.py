"""First request after Ready vs the tenth, with the warm-up (WARMUP=1) and without it (WARMUP=0).

    .venv/bin/python bench/warmup_bench.py                          # tiny random model, CPU
    python bench/warmup_bench.py --device cuda                      # tiny random model on a GPU
    python bench/warmup_bench.py --device cuda --full-size --new-tokens 64

Each run starts `python -m ocr_server`, waits until /health answers 200 (with WARMUP=1 that is
after the warm-up), then sends --requests pages one after another over HTTP (result cache off,
each page different, all of the same size) and times each answer. It prints every latency, and
the first against the median of the others. Random weights: the figures measure serving, not OCR
quality. --full-size builds the real DeepSeek-OCR-2 architecture with random bf16 weights
(bench/server_bench.py's write_model).
"""

from __future__ import annotations

import argparse
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


def run(model: Path, *, warmup: bool, device: str, requests: int, size: tuple[int, int], new_tokens: int,
        log_dir: Path) -> dict:
    port = free_port()
    env = {**os.environ, "MODEL_PATH": str(model), "DEVICE": device, "WARMUP": "1" if warmup else "0",
           "CACHE_ENTRIES": "0", "MAX_NEW_TOKENS": str(new_tokens), "TIMEOUT_SEC": "600", "HOST": "127.0.0.1",
           "PORT": str(port), "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(ROOT / "server") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("API_KEYS", None)
    env.pop("CONFIG_FILE", None)
    log_path = log_dir / f"server-warmup-{int(warmup)}.log"
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ocr_server"], env=env, cwd=ROOT, stdout=log_path.open("wb"),
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - t0 > 900:
                raise SystemExit("server not ready after 900 s")
            time.sleep(0.1)
        ready_s = time.monotonic() - t0
        m = re.search(r"^ocr_warmup_seconds (\S+)$", httpx.get(url + "/metrics").text, re.M)
        latencies = []
        with httpx.Client(base_url=url, timeout=600) as client:
            for i in range(requests):
                body = page(*size, seed=1000 + i)
                t = time.perf_counter()
                r = client.post("/v1/ocr", files={"file": ("p.png", body, "image/png")},
                                data={"max_new_tokens": str(new_tokens), "prompt_mode": "free"})
                latencies.append(time.perf_counter() - t)
                if r.status_code != 200:
                    raise SystemExit(f"request {i} failed: {r.status_code} {r.text[:500]}")
                layout, generated = r.json()["layout"], r.json()["usage"]["generated_tokens"]
        rest = statistics.median(latencies[1:])
        return {"warmup": warmup, "ready_s": round(ready_s, 2), "warmup_s": float(m.group(1)) if m else 0.0,
                "first_ms": round(latencies[0] * 1000, 1), "tenth_ms": round(latencies[-1] * 1000, 1),
                "median_rest_ms": round(rest * 1000, 1), "first_over_rest": round(latencies[0] / rest, 2),
                "all_ms": [round(x * 1000, 1) for x in latencies], "crops": layout["crops"],
                "visual_tokens": layout["visual_tokens"], "generated_tokens": generated}
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--full-size", action="store_true")
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--size", default="1600x1200", help="page size WxH (default: cropped, 5 crops)")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--model-dir", type=Path, help="reuse or keep the model here")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    size = tuple(int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model_dir or Path(tmp) / "model"
        if not (model / "config.json").is_file():
            from server_bench import write_model

            model.mkdir(parents=True, exist_ok=True)
            t = time.monotonic()
            write_model(model, args.full_size)
            print(f"model written in {time.monotonic() - t:.1f}s", file=sys.stderr)
        results = [run(model, warmup=w, device=args.device, requests=args.requests, size=size,
                       new_tokens=args.new_tokens, log_dir=Path(tmp)) for w in (False, True)]
    kind = "full-size random" if args.full_size else "tiny random"
    print(f"{kind} model, device {args.device}, page {args.size}, {args.new_tokens} new tokens, "
          f"{args.requests} sequential requests after /health said ready")
    print(f"{'WARMUP':>6} {'ready s':>8} {'warm-up s':>9} {'1st ms':>9} {'10th ms':>9} {'median 2..n ms':>14} {'1st/median':>10}")
    for r in results:
        print(f"{int(r['warmup']):>6} {r['ready_s']:>8} {r['warmup_s']:>9.2f} {r['first_ms']:>9} {r['tenth_ms']:>9} "
              f"{r['median_rest_ms']:>14} {r['first_over_rest']:>10}")
    for r in results:
        print(f"WARMUP={int(r['warmup'])} latencies ms: {r['all_ms']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
