"""What DECODE_COMPILE's compile costs and gives, on any device: the slots decoder's step compiled by
step.compiled_step at the capture's shapes (largest first, with the guard, then without), on the
tiny model deepened to --layers language-model layers (copies of its routed layer: the compile's
time grows with the graph, not with the sizes). Prints one JSON object: seconds each shape's first
step took (its compile), torch.compile's graphs and generated kernels, torch.compile's own split of
the time (bench/slot_steps.compile_seconds), and ms per step compiled and eager.

    .venv/bin/python bench/step_compile.py --layers 12                 # inductor, cold cache in a temp dir
    .venv/bin/python bench/step_compile.py --layers 12 --backend aot_eager

Run from a checkout of an earlier commit (with this file copied in) to compare designs on one machine.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / p) for p in ("server", "server_testing", "limits")] + [str(ROOT)]

from bench import dispatch_count  # noqa: E402 (the repository is put on the path just above)
from bench.slot_steps import compile_seconds, seconds_since  # noqa: E402 (the same)


def deeper(engine, layers: int):
    """A slots decoder like the engine's over a copy of its model with `layers` language-model
    layers: its own, then copies of its last (routed) one."""
    from dataclasses import replace

    from ocr_server.engines.transformers.slots import SlotDecoder

    model = copy.deepcopy(engine.model)
    blocks = model.model.language_model.layers
    while len(blocks) < layers:
        blocks.append(copy.deepcopy(blocks[-1]))
    return SlotDecoder(model, replace(engine.slots.plan), eos=engine.tokenizer.eos_token_id,
                       pad=engine.tokenizer.pad_token_id, pixels=engine._on_device, ngram_for=engine.ngram_settings)


def ms_per_step(step, d, rows: int, length: int, steps: int) -> float:
    import torch

    with torch.inference_mode():
        for _ in range(3):
            step(d, rows, length, False)
        t = time.perf_counter()
        for _ in range(steps):
            step(d, rows, length, False)
    return round((time.perf_counter() - t) / steps * 1e3, 2)


def measure(args) -> dict:
    import torch
    from torch._dynamo.utils import counters
    from torch._inductor import metrics

    from ocr_server.engines.transformers.step import compiled_step, decode_step

    engine = dispatch_count.load_engine(dispatch_count.model_path("tiny"), "cpu", "auto", max(args.rows), 32)
    d = deeper(engine, args.layers)
    length = d.plan.kv_buckets[-1]
    out: dict = {"torch": torch.__version__, "layers": len(d.layers), "backend": args.backend, "attention": d.attention,
                 "first_step_s": {}}
    step = compiled_step(args.backend, 64)
    before, t_all = compile_seconds(), time.perf_counter()
    with torch.inference_mode():
        for guard in (True, False):
            for rows in args.rows:
                t = time.perf_counter()
                step(d, rows, length, guard)
                out["first_step_s"][f"{rows}{' guard' if guard else ''}"] = round(time.perf_counter() - t, 1)
    out["compile_all_shapes_s"] = round(time.perf_counter() - t_all, 1)
    out["compile_s"] = seconds_since(before)
    out["graphs"] = counters["stats"]["unique_graphs"]
    out["generated_kernels"] = metrics.generated_kernel_count
    for name, fn in (("compiled", step), ("eager", decode_step)):
        out[f"ms_per_step_{name}"] = {rows: ms_per_step(fn, d, rows, length, args.steps) for rows in (max(args.rows), 1)}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=12, help="language-model layers (the real model has 12)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (inductor, as DECODE_COMPILE)")
    p.add_argument("--rows", type=lambda s: [int(x) for x in s.split(",")], default=[8, 4, 1],
                   help="row buckets, in the capture's order (largest first)")
    p.add_argument("--steps", type=int, default=20, help="steps timed per row count")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="step-compile-") as cache:
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", cache)  # cold unless the caller names a cache
        print(json.dumps(measure(args), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
