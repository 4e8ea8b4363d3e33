"""Each engine, in one run, on the same pages: the official-style sequential path, the raw engine
without HTTP, and the server over HTTP with many concurrent clients.

    .venv/bin/python bench/server_bench.py                          # both engines, tiny --for-vllm model, CPU
    .venv/bin/python bench/server_bench.py --engines transformers   # without .venv-vllm
    .venv/bin/python bench/server_bench.py --engines transformers --full-size --device cuda --new-tokens 512 \
        --size 1024 --images 64 --clients 1,64,32,8 --json figures.json     # the GPU figures (bench/gpu_check.sh)

For the transformers engine (in this process), in this order:
- slots: all pages through the slots decoder (DECODER=slots, slots.py), joining as slots free up, up to
  the plan's prefill_pages together (as the server's runner takes them); then vision+prefill ms per
  page with 1 and with 8 pages prefilled together, ms per decode step by batch size (for each experts implementation with
  --experts-compare), the CUDA graph capture time and the GPU memory peak;
- sequential: one page at a time through generate(), as the official infer() does;
- generate: the pages through generate() in static batches of --batch-size (DECODER=generate);
- with --compile-compare: ms per decode step with the step compiled (as DECODE_COMPILE) and the
  seconds the compile and capture took;
- server: `python -m ocr_server` with DECODER=slots, at each --clients level of concurrent HTTP clients.
For vLLM (in .venv-vllm, a worker of this script): sequential, raw (its AsyncLLM, the largest --clients
level in flight) and the server with ENGINE=vllm. Per path: pages/s, generated tokens/s, p50/p95
latency. --json is rewritten after every figure; --paths server adds to its raw figures.

Both engines load the same weights: random, in the official layout vLLM reads (the tiny model of
`python -m ocr_server_testing.tiny_model --for-vllm`: the real vision tower, a tiny language model;
--full-size: the real architecture, about 3.4B parameters in bf16). The figures measure serving,
not OCR quality. Generation runs for exactly --new-tokens tokens everywhere (EOS held back with
min_new_tokens / min_tokens, the n-gram guard off), so every path does the same work.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import engine_metrics  # noqa: E402 (the repository is put on the path just above)
from bench.figures import write_figures  # noqa: E402 (the repository is put on the path just above)
from bench.server_report import report  # noqa: E402 (the repository is put on the path just above)
from bench.slot_steps import (compile_seconds, drain, seconds_since, step_times, sync,  # noqa: E402 (the same)
                              use_compiled, use_experts)
from localcluster.ports import free_port  # noqa: E402 (the repository is put on the path just above)


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


REAL_LANGUAGE = {"vocab_size": 129280, "hidden_size": 1280, "intermediate_size": 6848, "moe_intermediate_size": 896,
                 "num_hidden_layers": 12, "num_attention_heads": 10, "num_key_value_heads": 10, "n_routed_experts": 64,
                 "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
                 "max_position_embeddings": 8192, "bos_token_id": 0, "eos_token_id": 1, "topk_method": "greedy",
                 "n_group": 1, "topk_group": 1}


def write_model(out: Path, full_size: bool, layout: str = "native") -> Path:
    """Random weights: tiny (native), the --for-vllm tiny model (official), or full size (native or official)."""
    from ocr_server_testing.tiny_model import write_tiny_model

    if not full_size:
        return write_tiny_model(out, for_vllm=True) if layout == "official" else write_tiny_model(out, "native")
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration, DeepseekOcr2ImageProcessorPil, DeepseekOcr2Processor

    from ocr_server.engines.transformers.convert import translate_official_config
    from ocr_server_testing.official_layout import native_to_official_state_dict
    from ocr_server_testing.tiny_model import TINY_NOTICE, build_tokenizer, tiny_official_config

    official = tiny_official_config(for_vllm=True)  # the real vision tower ...
    lang = {**official["language_config"], **REAL_LANGUAGE, "num_key_value_heads": 10, "torch_dtype": "bfloat16"}
    official.update({"language_config": lang, "torch_dtype": "bfloat16", "_name_or_path": "full-size-random",
                     "projector_config": {**official["projector_config"], "n_embed": lang["hidden_size"]},
                     **{k: lang[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers")}})
    official.pop("_tiny_random_notice", None)
    config = DeepseekOcr2Config.from_dict(translate_official_config(official))  # ... and the real language model
    with torch.device("cuda"):
        model = DeepseekOcr2ForConditionalGeneration(config).to(torch.bfloat16)
    with torch.no_grad():  # transformers starts SAM's relative-position tables at zero: a trained model's are not
        for name, param in model.named_parameters():
            if name.endswith(("rel_pos_h", "rel_pos_w")):
                param.normal_(0, 0.1)
    print(f"full-size random model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    if layout == "official":
        from safetensors.torch import save_file

        state = native_to_official_state_dict(model.state_dict())
        shard = "model-00001-of-000001.safetensors"
        save_file({k: v.contiguous().cpu() for k, v in state.items()}, str(out / shard), metadata={"format": "pt"})
        (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {k: shard for k in state}}))
        (out / "config.json").write_text(json.dumps(official, indent=2))
        tok.save_pretrained(out)
    else:
        model.save_pretrained(out, save_original_format=False)
        DeepseekOcr2Processor(image_processor=DeepseekOcr2ImageProcessorPil(), tokenizer=tok).save_pretrained(out)
    (out / "README.md").write_text(f"# full-size random DeepSeek-OCR-2 for benchmarks\n\n{TINY_NOTICE.replace('tiny widths', 'full widths')}\n")
    del model
    torch.cuda.empty_cache()
    return out


def bench_config(model_dir: Path, args, engine: str, decoder: str = "generate"):
    """The server config both the raw paths and the server use: n-gram guard off, no result cache."""
    from dataclasses import replace

    from ocr_server.runtime.config import load_config

    cfg = load_config(env={"MODEL_PATH": str(model_dir), "DEVICE": args.device, "ENGINE": engine,
                           "MAX_NEW_TOKENS": str(args.new_tokens), "MAX_VISUAL_TOKENS": "1120",
                           "BATCH_SIZE": str(args.batch_size), "CONCURRENCY": str(max(args.clients)), "CACHE_ENTRIES": "0",
                           "DECODER": decoder, "DECODE_SLOTS": str(max(args.clients))})
    return replace(cfg, runtime=replace(cfg.runtime, ngram_size=0))


def prepare_for(engine, n: int):
    """prepare(page) for exactly n generated tokens (EOS held back: random weights may end early)."""
    def prep(image, new: int = n):
        item = engine.prepare(image, prompt_mode="markdown", max_visual_tokens=None, max_new_tokens=new)
        item.min_new_tokens = new
        return item

    return prep


def decoded_pages(images: list[bytes]) -> list[Image.Image]:
    from ocr_server.serving.documents import load_document

    return [load_document(d, pages=None, max_pages=1, pdf_dpi=144, max_pixels=10**8)[1][0].image for d in images]


def summary(latencies: list[float], wall: float, pages: int, tokens: int) -> dict:
    return {"pages": pages, "pages_per_s": pages / wall, "tokens_per_s": tokens / wall, "wall_s": wall,
            "p50_s": statistics.median(latencies), "p95_s": pct(latencies, 95)}


def transformers_paths(model_dir: Path, images: list[bytes], args, out: dict, save) -> dict:
    """The transformers engine in this process: the slots decoder first (the figures the server is
    compared with), then sequential and generate() (static batches) on the reference pages, then
    (--compile-compare) the slots decoder's steps compiled; `out` is filled and saved after each
    figure, so a run cut short keeps what it measured."""
    from ocr_server.engines.transformers.engine import Engine

    engine = Engine(bench_config(model_dir, args, "transformers", decoder="slots"))
    engine.load()
    pages = decoded_pages(images)
    prep = prepare_for(engine, args.new_tokens)
    slots_paths(engine, pages, prep, args, out, save)
    engine.generate_reference([prep(pages[0], 2)])  # warm-up
    few = pages[:args.reference_pages or len(pages)]  # generate()'s paths are slow on long runs: a subset
    seq, tokens = [], 0
    t_all = time.perf_counter()
    for im in few:
        t = time.perf_counter()
        tokens += sum(len(g.token_ids) for g in engine.generate_reference([prep(im)]))
        sync(args.device)
        seq.append(time.perf_counter() - t)
    out["sequential"] = summary(seq, time.perf_counter() - t_all, len(few), tokens)
    save()
    raw, tokens = [], 0
    t_all = time.perf_counter()
    for at in range(0, len(few), args.batch_size):
        gens = engine.generate_reference([prep(im) for im in few[at:at + args.batch_size]])
        sync(args.device)
        tokens += sum(len(g.token_ids) for g in gens)
        raw += [time.perf_counter() - t_all] * len(gens)
    out["generate"] = summary(raw, time.perf_counter() - t_all, len(few), tokens)
    save()
    if args.compile_compare:  # last: the compile's time on a GPU's host is not known yet
        slots = engine.slots
        out["compiled_step"] = {"backend": args.compile_compare, "started_unix": time.time()}  # a cut compile shows
        save()
        before = compile_seconds()
        out["compiled_step"].update(use_compiled(slots, args.compile_compare))
        save()
        if out["compiled_step"]["compiled"]:
            out["step_ms"][f"{slots.experts_name}+compiled"] = step_times(slots, pages, prep, args)
        out["compiled_step"]["compile_s"] = seconds_since(before)  # on a CPU the shapes compile at their first steps
        save()
    return out


def slots_paths(engine, pages: list, prep, args, out: dict, save) -> None:
    """The slots decoder: all pages joining as slots free up, then prefill, capture and per-step figures."""
    slots = engine.slots
    slots.run([prep(pages[0], 2)])  # warm-up of the eager path and the prefill
    out.update({"capture_s": slots.capture() if args.device == "cuda" else 0.0,
                "kv_mib_per_slot": slots.kv_bytes_per_slot() / 2**20, "slot_count": slots.plan.slots})
    items = [prep(im) for im in pages]
    ends, waiting, prefills = {}, list(items), 0
    t_all = time.perf_counter()
    while waiting or not slots.idle():
        if waiting and slots.free_slots():  # as the server's runner takes them: up to prefill_pages together
            joining = [waiting.pop(0) for _ in range(min(len(waiting), slots.free_slots(), slots.plan.prefill_pages))]
            slots.admit(joining)
            prefills += 1
        for f in slots.step():
            ends[id(f.item)] = (time.perf_counter() - t_all, len(f.token_ids))
    sync(args.device)
    wall = time.perf_counter() - t_all
    out["slots"] = summary([e[0] for e in ends.values()], wall, len(items), sum(e[1] for e in ends.values()))
    out["slots"]["pages_per_prefill"] = len(items) / prefills  # the server's level figures' "engine" to compare
    save()
    out["prefill_ms_per_page"] = {}
    for k in sorted({1, min(8, slots.plan.prefill_pages, slots.plan.slots, len(pages))}):
        per_page = []
        for at in range(0, 8, k):  # vision encoder + language-model prefill + the copy into the slots
            batch = [prep(pages[(at + i) % len(pages)]) for i in range(k)]
            sync(args.device)
            t = time.perf_counter()
            slots.admit(batch)
            sync(args.device)
            per_page.append((time.perf_counter() - t) / k)
            drain(slots)
        out["prefill_ms_per_page"][str(k)] = {"p50": statistics.median(per_page) * 1000, "max": max(per_page) * 1000}
    save()
    default = slots.plan.experts
    out["step_ms"] = {}
    for impl in ["grouped_mm", "batched_mm"] if args.experts_compare else [None]:
        if impl is not None:
            use_experts(slots, impl)
        out["step_ms"][impl or default] = step_times(slots, pages, prep, args)
        save()
    if args.experts_compare:
        use_experts(slots, "grouped_mm" if default == "auto" else default)
    if args.device == "cuda":
        import torch

        out["gpu_memory_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        save()


async def _vllm_paths(model_dir: Path, images: list[bytes], args) -> dict:
    from ocr_server.engines.vllm.engine import VllmEngine

    engine = VllmEngine(bench_config(model_dir, args, "vllm"))
    engine.load()
    engine.loop = asyncio.get_running_loop()
    pages = decoded_pages(images)
    prep = prepare_for(engine, args.new_tokens)
    await engine.generate(prep(pages[0], 2))  # warm-up
    seq, tokens = [], 0
    t_all = time.perf_counter()
    for im in pages:
        t = time.perf_counter()
        tokens += len((await engine.generate(prep(im))).token_ids)
        seq.append(time.perf_counter() - t)
    out = {"sequential": summary(seq, time.perf_counter() - t_all, len(pages), tokens)}
    gate = asyncio.Semaphore(max(args.clients))

    async def one(im):
        async with gate:
            t = time.perf_counter()
            g = await engine.generate(prep(im))
            return time.perf_counter() - t, len(g.token_ids)

    t_all = time.perf_counter()
    done = await asyncio.gather(*(one(im) for im in pages))
    out["raw"] = summary([d[0] for d in done], time.perf_counter() - t_all, len(pages), sum(d[1] for d in done))
    engine.shutdown()
    return out


def engine_paths(engine: str, model_dir: Path, images: list[bytes], args, out: dict, save) -> None:
    """Sequential and raw figures of one engine into `out`; vLLM's run in .venv-vllm (a worker of this script)."""
    if engine == "transformers":
        transformers_paths(model_dir, images, args, out, save)
        return
    with tempfile.NamedTemporaryFile("w+", suffix=".json") as result:
        cmd = [str(VLLM_PYTHON), __file__, "--worker", str(model_dir), "--worker-out", result.name, *sys.argv[1:]]
        subprocess.run(cmd, check=True, cwd=ROOT)
        out.update(json.loads(Path(result.name).read_text()))
        save()


VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


SERVER_CODE = """
import runpy
from dataclasses import replace
from ocr_server.engines import factory as engine_api
create = engine_api.create_engine
def without_guard(cfg):  # the n-gram guard off, as on the raw paths (it has no environment setting)
    return create(replace(cfg, runtime=replace(cfg.runtime, ngram_size=0)))
engine_api.create_engine = without_guard
runpy.run_module('ocr_server', run_name='__main__')
"""


def variant_env(text: str) -> dict[str, str]:
    """'PREPROCESS_MODE=processes;PREFILL_SHARE=1' -> the server's environment overrides."""
    pairs = [p.partition("=") for p in text.split(";") if p.strip()]
    if not pairs or any(not k.strip() or not sep for k, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"--variant {text!r}: KEY=VALUE[;KEY=VALUE...]")
    return {k.strip(): v.strip() for k, _, v in pairs}


def server_path(engine: str, model_dir: Path, images: list[bytes], args, out: dict, save) -> None:
    """`python -m ocr_server` with ENGINE=engine (transformers: DECODER=slots), at each --clients level
    in the order given, each level saved into `out` as soon as it is measured; then each --variant's
    server (the same with some settings changed) at the largest level, into out["variants"]."""
    serve_levels(engine, model_dir, images, args, {}, args.clients, out, save)
    for variant in args.variant:  # a variant that fails is recorded, and the next one still measured
        got = out.setdefault("variants", {}).setdefault(variant, {})
        try:
            serve_levels(engine, model_dir, images, args, variant_env(variant), [max(args.clients)], got, save)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - SystemExit: the server exited or never got ready
            got["error"] = str(exc)[-2000:]
            save()
            print(f"{engine} server with {variant} failed: {got['error']}", file=sys.stderr, flush=True)


def serve_levels(engine: str, model_dir: Path, images: list[bytes], args, overrides: dict[str, str], levels: list[int],
                 out: dict, save) -> None:
    """One server (the bench's settings, then `overrides`) measured at each of `levels`, into `out`."""
    import httpx

    port = free_port()
    top = max(args.clients)
    env = {**os.environ, "MODEL_PATH": str(model_dir), "DEVICE": args.device, "HOST": "127.0.0.1", "PORT": str(port),
           "ENGINE": engine, "DECODER": "slots", "DECODE_SLOTS": str(top), "BATCH_SIZE": str(min(top, 64)),
           "CONCURRENCY": str(top), "QUEUE_SIZE": str(len(images) * 2), "BATCH_WAIT_MS": "30",
           "MAX_NEW_TOKENS": str(args.new_tokens), "MAX_VISUAL_TOKENS": "1120", "TIMEOUT_SEC": "3600", "CACHE_ENTRIES": "0",
           # On a GPU the raw paths ran first in this process and are warm: so is the server (its warm-up
           # compiles every crop count's kernels and captures the decode graphs before Ready).
           "WARMUP": "1" if args.device == "cuda" else "0", **overrides}
    env.pop("API_KEYS", None)
    python = str(VLLM_PYTHON) if engine == "vllm" else sys.executable
    log = tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False)
    proc = subprocess.Popen([python, "-c", SERVER_CODE], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 1800
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"server exited: {Path(log.name).read_text()[-3000:]}")
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
                if health.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("server never became ready")
            time.sleep(0.2)

        async def one(c, gate, data):
            async with gate:
                t = time.perf_counter()
                r = await c.post("/v1/ocr", files={"file": ("p.png", data, "image/png")},
                                 data={"min_new_tokens": str(args.new_tokens)})
                r.raise_for_status()
                return time.perf_counter() - t, r.json()

        async def run_all(batch, clients):
            gate = asyncio.Semaphore(clients)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=3600) as c:
                return await asyncio.gather(*(one(c, gate, d) for d in batch))

        asyncio.run(run_all([page(args.size + 8, args.size, seed=999)], 1))  # warm-up (another page: no cache hit)
        out["health"] = health.json()
        save()
        for clients in levels:
            batch = images[:min(len(images), max(8, 2 * clients))]  # enough pages to keep `clients` busy
            before = engine_metrics.scrape(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
            t0 = time.perf_counter()
            results = asyncio.run(run_all(batch, clients))
            wall = time.perf_counter() - t0
            got = summary([r[0] for r in results], wall, len(batch), sum(r[1]["usage"]["generated_tokens"] for r in results))
            after = engine_metrics.scrape(httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text)
            got["engine"] = engine_metrics.level_figures(before, after, wall)
            got["layout"] = results[0][1]["layout"]
            # time outside the model: the pages' preprocessing (worker threads) as a share of the requests' time
            timings = [r[1]["timings"] for r in results]
            got["preprocess_ms_p50"] = statistics.median(t["preprocess_ms"] for t in timings)
            got["preprocess_share"] = sum(t["preprocess_ms"] for t in timings) / sum(t["total_ms"] for t in timings)
            out[f"clients_{clients}"] = got
            save()
            print(f"{engine} server{overrides or ''}, {clients} clients: {json.dumps(got)}", file=sys.stderr, flush=True)
    except Exception:  # a failed request or level: the server's own account of it, before its log goes
        print(f"server log, last 3000 characters:\n{Path(log.name).read_text(errors='replace')[-3000:]}",
              file=sys.stderr, flush=True)
        raise
    finally:
        proc.terminate()
        proc.wait(60)
        log.close()
        os.unlink(log.name)  # a scratch file: one was left in /tmp by every server measured


def clients_list(text: str) -> list[int]:
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--clients {text!r}: comma-separated integers, e.g. 1,8,32,64") from None
    if not levels or min(levels) < 1 or max(levels) > 1024:
        raise argparse.ArgumentTypeError(f"--clients {text!r}: each level 1..1024")
    return levels


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", type=int, default=16)
    p.add_argument("--size", type=int, default=640, help="square page size in pixels (1024 for the GPU figure)")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--batch-size", type=int, default=8, help="generate()'s static batch on the generate path")
    p.add_argument("--clients", type=clients_list, default=[8],
                   help="concurrent HTTP clients, one run per level (1,8,32,64); the largest sizes the slots and vLLM's raw path")
    p.add_argument("--engines", default="transformers,vllm", help="comma-separated: transformers, vllm")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--full-size", action="store_true", help="real architecture, random bf16 weights (needs a GPU)")
    p.add_argument("--reference-pages", type=int, default=0,
                   help="run the sequential and generate paths on the first N pages only (0: all)")
    p.add_argument("--experts-compare", action="store_true", help="ms per decode step with grouped_mm and with batched_mm experts")
    p.add_argument("--compile-compare", metavar="BACKEND", default="",
                   help="then ms per decode step with the step compiled by this torch.compile backend (inductor, as DECODE_COMPILE)")
    p.add_argument("--model-path", help="serve this official-layout directory instead of writing a random model")
    p.add_argument("--json", help="also write the figures to this file, each as soon as it is measured")
    p.add_argument("--variant", action="append", default=[], type=lambda t: variant_env(t) and t,
                   help="also the server with these settings (KEY=VALUE[;KEY=VALUE]) at the largest --clients level; repeatable")
    p.add_argument("--paths", choices=["all", "raw", "server"], default="all",
                   help="raw: the engines without HTTP; server: over HTTP (added to --json's figures); all: both")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # internal: vLLM's sequential/raw paths in .venv-vllm
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.full_size and args.device != "cuda":
        p.error("--full-size needs --device cuda")
    images = make_images(args.images, args.size)
    if args.worker:
        Path(args.worker_out).write_text(json.dumps(asyncio.run(_vllm_paths(Path(args.worker), images, args))))
        return 0
    engines = [e for e in args.engines.split(",") if e]
    if "vllm" in engines and not VLLM_PYTHON.is_file():
        p.error(f"{VLLM_PYTHON} is missing: `make venv-vllm`, or --engines transformers")

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_path) if args.model_path else write_model(Path(tmp) / "model", args.full_size, "official")
        earlier = args.paths == "server" and args.json and Path(args.json).is_file()  # a --paths raw run's figures
        figures = json.loads(Path(args.json).read_text()) if earlier else {"engines": {}}
        figures.update({"model": "full-size random (bf16)" if args.full_size else (args.model_path or "tiny random --for-vllm"),
                        "device": args.device, "images": args.images, "size": args.size, "new_tokens": args.new_tokens,
                        "batch_size": args.batch_size, "clients": args.clients})
        save = lambda: write_figures(args.json, figures)  # noqa: E731
        for engine in engines:
            got = figures["engines"].setdefault(engine, {})
            if args.paths in ("all", "raw"):
                engine_paths(engine, model_dir, images, args, got, save)
            if args.paths in ("all", "server"):
                got["server"] = {}
                server_path(engine, model_dir, images, args, got["server"], save)
            print(f"{engine}: {json.dumps(got)}", file=sys.stderr, flush=True)  # each engine as soon as it is measured
    print(json.dumps(figures, indent=2))
    report(figures, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
