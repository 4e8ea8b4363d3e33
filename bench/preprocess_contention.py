"""What preparing pages costs the engine thread: an operator's dispatch time alone, beside N threads
that prepare pages (PREPROCESS_MODE=threads) and beside N worker processes that do
(PREPROCESS_MODE=processes), with the GPU's page format (uint8 views, normalised on the device).

    .venv/bin/python bench/preprocess_contention.py --model-path DIR [--workers 2,8] [--json F]

Why: on a GPU the engine thread launches every kernel from Python, one small operator at a time;
whatever holds the interpreter lock beside it slows each launch. Also reports ms per page through
each path, sequentially, from one calling thread.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.server_bench import bench_config, decoded_pages, make_images  # noqa: E402 (the repository is put on the path just above)

OPS = 20_000


def dispatch_us(x) -> float:
    """Microseconds per small in-place operator, as the engine thread dispatches them."""
    t = time.perf_counter()
    for _ in range(OPS):
        x.add_(1)
    return (time.perf_counter() - t) / OPS * 1e6


def beside(prepare, workers: int, x) -> tuple[float, int]:
    """dispatch_us while `workers` threads call prepare() in a loop; and how many pages they prepared."""
    stop, done = threading.Event(), []

    def loop() -> None:
        while not stop.is_set():
            prepare()
            done.append(1)

    threads = [threading.Thread(target=loop) for _ in range(workers)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    us = dispatch_us(x)
    stop.set()
    for t in threads:
        t.join()
    return us, len(done)


def measure(model_path: Path, workers: list[int], size: int = 1024) -> dict:
    """The figures (see the module's docstring), printed as they come."""
    import torch

    from ocr_server.engines.transformers.engine import Engine
    from ocr_server.engines.transformers.prepare_pool import PreparePool

    torch.set_num_threads(1)
    ns = SimpleNamespace(device="cpu", new_tokens=8, batch_size=8, clients=[2])
    cfg = bench_config(model_path, ns, "transformers", decoder="slots")
    engine = Engine(replace(cfg, runtime=replace(cfg.runtime, preprocess_mode="threads")))
    engine.load_preprocessing()
    engine.uint8_pixels = True  # the GPU's format: uint8 views, normalised on the device
    image = decoded_pages(make_images(1, size))[0]
    kwargs = {"prompt_mode": "markdown", "max_visual_tokens": None, "prompt": None}
    x = torch.zeros(16)
    out: dict = {"alone_us": dispatch_us(x), "threads": {}, "processes": {}}
    in_thread = lambda: engine.prepare_arrays(image, **kwargs)  # noqa: E731
    t = time.perf_counter()
    for _ in range(4):
        in_thread()
    out["thread_ms_per_page"] = (time.perf_counter() - t) / 4 * 1000
    for n in workers:
        us, pages = beside(in_thread, n, x)
        out["threads"][str(n)] = {"dispatch_us": us, "pages": pages}
        pool = PreparePool(engine.cfg, n, uint8_pixels=True)
        pool.start()
        remote = lambda: pool.run(image, in_thread, **kwargs)  # noqa: E731
        t = time.perf_counter()
        for _ in range(4):
            remote()
        ms = (time.perf_counter() - t) / 4 * 1000
        us, pages = beside(remote, n, x)
        out["processes"][str(n)] = {"dispatch_us": us, "pages": pages, "ms_per_page": ms}
        pool.close()
        print(f"{n} workers: dispatch {out['threads'][str(n)]['dispatch_us']:.2f} us beside threads, {us:.2f} us beside "
              f"processes (alone {out['alone_us']:.2f} us); one page {out['thread_ms_per_page']:.0f} ms in a thread, "
              f"{ms:.0f} ms through a process", flush=True)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True)
    p.add_argument("--workers", default="2,8")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--json")
    args = p.parse_args()
    out = measure(Path(args.model_path), [int(w) for w in args.workers.split(",")], args.size)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
