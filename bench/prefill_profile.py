"""Where a prefill's time goes: ms per page with k pages prefilled together (the vision tower and the
language model apart), the host's preprocessing per page, and the profiler's table of one prefill at
a few k (the heaviest operators and kernels, how many kernels, how much of the wall time they fill).

    python bench/prefill_profile.py --model-path DIR --device cuda --json profile.json   # bench/gpu_check.sh's profile phase
    .venv/bin/python bench/prefill_profile.py --model-path DIR --ks 1,2 --profile-ks 1   # the same on a CPU

Why: on an H200 a 1024x1024 page (4 crops, 832 visual tokens) took 77 ms of vision and prefill
alone (2026-12-04), against a few ms of arithmetic; whether the time is in kernels or between
them (launches, host syncs) decides what to change.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.figures import write_figures  # noqa: E402 (the repository is put on the path just above)
from bench.preprocess_contention import measure as measure_contention  # noqa: E402
from bench.server_bench import bench_config, decoded_pages, make_images, prepare_for  # noqa: E402
from bench.slot_steps import drain, sync  # noqa: E402

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")


def ks_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def timed_prefill(slots, items: list, device: str, split: bool) -> dict[str, float]:
    """One prefill of `items`; with `split`, the device synced after each chunk: the vision tower's
    chunks apart from the last one (the language model)."""
    sync(device)
    t0 = time.perf_counter()
    chunks, vision = 0, 0.0
    for _ in slots.prefill(items):
        chunks += 1
        if split:
            sync(device)
            vision = time.perf_counter() - t0
    sync(device)
    total = time.perf_counter() - t0
    drain(slots)
    return {"ms": total * 1000, "vision_ms": vision * 1000, "lm_ms": (total - vision) * 1000, "chunks": chunks}


def kernel_table(prof, top: int) -> dict:
    """The profile of one prefill: operators by host time, kernels by device time, their totals."""
    rows = prof.key_averages()
    dev = lambda e: getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0) or 0  # noqa: E731
    kernels = [e for e in rows if dev(e) > 0 and "DeviceType.CUDA" in str(getattr(e, "device_type", ""))]
    ops = sorted((e for e in rows if e.key.startswith("aten::")), key=lambda e: -e.self_cpu_time_total)
    return {
        "kernels": sum(e.count for e in kernels),
        "kernel_ms": sum(dev(e) for e in kernels) / 1000,
        "launches": sum(e.count for e in rows if "LaunchKernel" in e.key or e.key.startswith("cuLaunch")),
        "sync_calls": {e.key: e.count for e in rows if e.key in SYNC_CALLS},
        "aten_ops": sum(e.count for e in rows if e.key.startswith("aten::")),
        "top_kernels": [{"name": e.key[:120], "count": e.count, "ms": dev(e) / 1000}
                        for e in sorted(kernels, key=lambda e: -dev(e))[:top]],
        "top_ops_host": [{"name": e.key, "count": e.count, "self_cpu_ms": e.self_cpu_time_total / 1000,
                          "device_ms": (getattr(e, "device_time_total", 0) or 0) / 1000} for e in ops[:top]],
    }


def sam_fold_error(model, views: int = 2) -> dict:
    """SAM's folded attention (sam_attention.py) against transformers' own, on the model's device and
    dtype, at the real model's shapes (its global layers' token grid and its windows), with weights
    and inputs drawn at random (a random model's SAM weights are about 1e-10, which would make any
    two attentions agree): each one's ||out - ref|| / ||ref||, ref being transformers' forward in
    float32 on the same weights. The fold passes where its error is about the original's."""
    import copy
    import types

    import torch
    from transformers.models.deepseek_ocr2.modeling_deepseek_ocr2 import DeepseekOcr2SamVisionSdpaAttention as Original

    from ocr_server.engines.transformers import sam_attention

    sam = model.model.vision_tower.sam_encoder
    device, dtype = model.device, model.dtype
    grid = sam.config.image_size // sam.config.patch_size
    out = {}
    for layer in {layer.window_size: layer for layer in sam.layers}.values():
        size = layer.window_size or grid
        attn = copy.deepcopy(layer.attn).float()
        attn.__dict__.pop("forward", None)
        with torch.no_grad():
            for name, param in attn.named_parameters():
                param.normal_(0, 0.1 if "rel_pos" in name else 0.05)
        x = torch.randn(views, size, size, attn.qkv.in_features, device=device)
        low = copy.deepcopy(attn).to(dtype)
        folded = types.MethodType(sam_attention.forward, low)
        low._sam_key_positions = {}
        with torch.inference_mode():
            ref = Original.forward(attn, x)[0]
            errors = {name: float(((got.float() - ref).norm() / ref.norm()))
                      for name, got in (("folded", folded(x.to(dtype))[0]), ("original", Original.forward(low, x.to(dtype))[0]))}
        out["global" if not layer.window_size else f"window {size}"] = {"tokens": size * size, **errors}
    return {"dtype": str(dtype), "layers": out,
            "ok": all(e["folded"] <= 2 * e["original"] + 1e-6 for e in out.values())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-path", required=True)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--ks", type=ks_list, default=[1, 2, 4, 8, 16], help="pages prefilled together")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile-ks", type=ks_list, help="k of the profiled prefills (default: the least k and 8, or the most if less)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--contention", default="", help="also bench/preprocess_contention.py with these worker counts (e.g. 2,8)")
    p.add_argument("--json")
    args = p.parse_args()

    import torch
    from torch.profiler import ProfilerActivity, profile

    from ocr_server.engines.transformers.engine import Engine

    args.profile_ks = args.profile_ks or list(dict.fromkeys([min(args.ks), min(8, max(args.ks))]))
    most = max(args.ks + args.profile_ks)
    ns = SimpleNamespace(device=args.device, new_tokens=4, batch_size=8, clients=[most])
    engine = Engine(bench_config(Path(args.model_path), ns, "transformers", decoder="slots"))
    engine.load()
    slots = engine.slots
    pages = decoded_pages(make_images(most, args.size))
    prep = prepare_for(engine, 4)
    t = time.perf_counter()
    items = [prep(im) for im in pages]
    out: dict = {"device": args.device, "size": args.size, "crops": items[0].plan.crops,
                 "prepare_ms_per_page": (time.perf_counter() - t) * 1000 / len(items), "vision_views": slots.plan.vision_views,
                 "k": {}, "profile": {}}
    save = lambda: write_figures(args.json, out)  # noqa: E731
    out["sam_fold"] = fold = sam_fold_error(engine.model)
    print(f"SAM attention folded ({fold['dtype']}), relative error against transformers' own in float32: " + "; ".join(
        f"{name}: folded {e['folded']:.2e}, original {e['original']:.2e}" for name, e in fold["layers"].items()), flush=True)
    timed_prefill(slots, items[:2], args.device, split=False)  # warm-up
    for k in args.ks:
        runs = [timed_prefill(slots, [prep(im) for im in pages[:k]], args.device, split=False) for _ in range(args.repeats)]
        split = timed_prefill(slots, [prep(im) for im in pages[:k]], args.device, split=True)
        ms = statistics.median(r["ms"] for r in runs)
        out["k"][str(k)] = {"ms": ms, "ms_per_page": ms / k, "vision_ms_synced": split["vision_ms"],
                            "lm_ms_synced": split["lm_ms"], "chunks": split["chunks"]}
        print(f"k={k}: {ms:.1f} ms, {ms / k:.1f} ms per page (synced per chunk: vision {split['vision_ms']:.1f} ms, "
              f"language model {split['lm_ms']:.1f} ms, {split['chunks']} chunks)", flush=True)
        save()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
    for k in args.profile_ks:
        batch = [prep(im) for im in pages[:k]]
        sync(args.device)
        with profile(activities=activities) as prof:
            t = time.perf_counter()
            for _ in slots.prefill(batch):
                pass
            sync(args.device)
            wall = (time.perf_counter() - t) * 1000
        drain(slots)
        table = kernel_table(prof, args.top)
        table["wall_ms"] = wall
        out["profile"][str(k)] = table
        print(f"profile k={k}: wall {wall:.1f} ms, {table['kernels']} kernels filling {table['kernel_ms']:.1f} ms, "
              f"{table['aten_ops']} aten ops, syncs {table['sync_calls']}", flush=True)
        for row in table["top_kernels"][:12]:
            print(f"    {row['ms']:8.2f} ms  x{row['count']:<5} {row['name']}")
        for row in table["top_ops_host"][:8]:
            print(f"    host {row['self_cpu_ms']:8.2f} ms  x{row['count']:<5} {row['name']}")
        save()
    if args.device == "cuda":
        out["gpu_memory_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    save()
    if args.contention:  # this host's: what preparing pages in threads or processes costs the engine thread
        out["preprocess_contention"] = measure_contention(Path(args.model_path), ks_list(args.contention), args.size)
        save()
    print(json.dumps({k: v for k, v in out.items() if k != "profile"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
