"""Sequential single-image generate (what the official infer() does) vs the batched server, same images, one run.

    .venv/bin/python bench/server_bench.py                      # tiny random model, CPU
    .venv/bin/python bench/server_bench.py --full-size --device cuda --new-tokens 512 --size 1024

Both sides use random weights (no checkpoint is downloaded): the figures measure serving, not OCR
quality. --full-size builds the real DeepSeek-OCR-2 architecture (about 3.4B parameters) with
random bf16 weights. The server side starts `python -m ocr_server` and sends all images at once
over HTTP; the sequential side calls the engine for one image at a time in this process.
Generation runs for exactly --new-tokens tokens on both sides (EOS is suppressed by the random
weights only by chance, so the n-gram guard is off and min_new_tokens forces the length).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values) + 0.5) - 1))]


def page(width: int, height: int, seed: int) -> bytes:
    """A white page with dark text-like bars of random lengths (the same seed, the same page)."""
    rng = np.random.default_rng(seed)
    arr = np.full((height, width, 3), 255, dtype=np.uint8)
    for y in range(16, height - 16, 28):
        arr[y:y + 10, 16:int(rng.integers(width // 3, width - 16))] = 20
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def make_images(n: int, size: int) -> list[bytes]:
    return [page(size, size, seed=i) for i in range(n)]


def write_model(out: Path, full_size: bool) -> Path:
    from ocr_server.testing.tiny_model import write_tiny_model

    if not full_size:
        return write_tiny_model(out, "native")
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration, DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor

    from ocr_server.convert import translate_official_config
    from ocr_server.testing.tiny_model import TINY_NOTICE, build_tokenizer

    real = {"language_config": {"vocab_size": 129280, "hidden_size": 1280, "intermediate_size": 6848,
                                "moe_intermediate_size": 896, "num_hidden_layers": 12, "num_attention_heads": 10,
                                "num_key_value_heads": 10, "n_routed_experts": 64, "n_shared_experts": 2,
                                "num_experts_per_tok": 6, "first_k_dense_replace": 1, "max_position_embeddings": 8192,
                                "bos_token_id": 0, "eos_token_id": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1},
            "vision_config": {"width": {"qwen2-0-5b": {"dim": 896}, "sam_vit_b": {"width": 768, "layers": 12, "heads": 12,
                                                                                  "global_attn_indexes": [2, 5, 8, 11],
                                                                                  "downsample_channels": [512, 1024]}}}}
    config = DeepseekOcr2Config.from_dict(translate_official_config(real))
    with torch.device("cuda"):
        model = DeepseekOcr2ForConditionalGeneration(config).to(torch.bfloat16)
    print(f"full-size random model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters", file=sys.stderr)
    model.save_pretrained(out, save_original_format=False)
    tok = build_tokenizer()
    DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tok).save_pretrained(out)
    (out / "README.md").write_text(f"# full-size random DeepSeek-OCR-2 for benchmarks\n\n{TINY_NOTICE.replace('tiny widths', 'full widths')}\n")
    del model
    torch.cuda.empty_cache()
    return out


def sequential(model_dir: Path, images: list[bytes], args) -> list[float]:
    """One image per generate call, one after another (official infer())."""
    from ocr_server.config import load_config
    from ocr_server.documents import load_document
    from ocr_server.engine import Engine

    env = {"MODEL_PATH": str(model_dir), "DEVICE": args.device, "MAX_NEW_TOKENS": str(args.new_tokens)}
    engine = Engine(load_config(env=env))
    engine.cfg = engine.cfg.__class__(engine.cfg.service, engine.cfg.model,
                                      engine.cfg.runtime.__class__(**{**engine.cfg.runtime.__dict__, "ngram_size": 0}))
    engine.load()
    patch_min_tokens(engine, args.new_tokens)
    engine.generate_batch([engine.prepare(load_document(images[0], pages=None, max_pages=1, pdf_dpi=144, max_pixels=10**8)[1][0].image,
                                          prompt_mode="markdown", max_visual_tokens=None, max_new_tokens=2)])  # warm-up
    latencies = []
    for data in images:
        t = time.perf_counter()
        page = load_document(data, pages=None, max_pages=1, pdf_dpi=144, max_pixels=10**8)[1][0].image
        item = engine.prepare(page, prompt_mode="markdown", max_visual_tokens=None, max_new_tokens=args.new_tokens)
        engine.generate_batch([item])
        sync(args.device)
        latencies.append(time.perf_counter() - t)
    del engine
    return latencies


def patch_min_tokens(engine, n: int) -> None:
    """Force exactly n generated tokens (random weights may emit EOS early) on both sides."""
    original = engine.model.generate

    def generate(*a, **kw):
        kw.setdefault("min_new_tokens", min(n, kw.get("max_new_tokens", n)))
        return original(*a, **kw)

    engine.model.generate = generate


def sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def batched_server(model_dir: Path, images: list[bytes], args) -> tuple[list[float], float, dict]:
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MODEL_PATH": str(model_dir), "DEVICE": args.device, "HOST": "127.0.0.1", "PORT": str(port),
           "BATCH_SIZE": str(args.batch_size), "CONCURRENCY": str(args.batch_size * 2), "QUEUE_SIZE": str(len(images) * 2),
           "BATCH_WAIT_MS": "30", "MAX_NEW_TOKENS": str(args.new_tokens), "TIMEOUT_SEC": "3600", "CACHE_ENTRIES": "0",
           "OCR_BENCH_MIN_NEW_TOKENS": str(args.new_tokens)}
    env.pop("API_KEYS", None)
    code = ("import ocr_server.engine as e, runpy, os\n"
            "n=int(os.environ['OCR_BENCH_MIN_NEW_TOKENS'])\n"
            "orig=e.Engine.load\n"
            "def load(self):\n"
            "    from dataclasses import replace\n"
            "    self.cfg = replace(self.cfg, runtime=replace(self.cfg.runtime, ngram_size=0))\n"
            "    info=orig(self); g=self.model.generate\n"
            "    self.model.generate=lambda *a, **k: g(*a, **{**k, 'min_new_tokens': min(n, k.get('max_new_tokens', n))})\n"
            "    return info\n"
            "e.Engine.load=load\n"
            "runpy.run_module('ocr_server', run_name='__main__')\n")
    log = tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 1800
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {Path(log.name).read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server never became ready")
            time.sleep(0.2)

        async def one(c, data):
            t = time.perf_counter()
            r = await c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")})
            r.raise_for_status()
            return time.perf_counter() - t, r.json()

        async def run_all(batch):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=3600) as c:
                return await asyncio.gather(*(one(c, d) for d in batch))

        asyncio.run(run_all(images[:1]))  # warm-up
        t0 = time.perf_counter()
        results = asyncio.run(run_all(images))
        wall = time.perf_counter() - t0
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        hist = [line for line in metrics.splitlines() if line.startswith(("ocr_batch_size_sum", "ocr_batch_size_count"))]
        return [r[0] for r in results], wall, {"batch_metrics": hist, "layout": results[0][1]["layout"],
                                               "generated_tokens": results[0][1]["usage"]["generated_tokens"]}
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--size", type=int, default=640, help="square page size in pixels (1024 for the GPU figure)")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--full-size", action="store_true", help="real architecture, random bf16 weights (needs a GPU)")
    p.add_argument("--model-path", help="serve this directory instead of writing a random model")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    if args.full_size and args.device != "cuda":
        p.error("--full-size needs --device cuda")

    images = make_images(args.images, args.size)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_path) if args.model_path else write_model(Path(tmp) / "model", args.full_size)
        seq = sequential(model_dir, images, args)
        srv, wall, extra = batched_server(model_dir, images, args)
    seq_wall = sum(seq)
    figures = {
        "model": "full-size random (bf16)" if args.full_size else ("tiny random" if not args.model_path else args.model_path),
        "device": args.device, "images": args.images, "size": args.size, "new_tokens": args.new_tokens,
        "batch_size": args.batch_size, "layout": extra["layout"], "generated_tokens_per_page": extra["generated_tokens"],
        "sequential": {"pages_per_s": args.images / seq_wall, "p50_s": statistics.median(seq), "p95_s": pct(seq, 95)},
        "server": {"pages_per_s": args.images / wall, "p50_s": statistics.median(srv), "p95_s": pct(srv, 95)},
        "throughput_ratio": (args.images / wall) / (args.images / seq_wall),
        "server_batch_metrics": extra["batch_metrics"],
    }
    print(json.dumps(figures, indent=2))
    print(f"\nthroughput: server {figures['server']['pages_per_s']:.3f} pages/s vs sequential "
          f"{figures['sequential']['pages_per_s']:.3f} pages/s -> ratio {figures['throughput_ratio']:.2f}x")
    print(f"latency sequential p50 {figures['sequential']['p50_s']:.2f}s p95 {figures['sequential']['p95_s']:.2f}s | "
          f"server (all {args.images} sent at once) p50 {figures['server']['p50_s']:.2f}s p95 {figures['server']['p95_s']:.2f}s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
