"""Token identity of the two decoders: generate() vs the slots decoder, page by page, first divergence and its cause.

    python bench/slots_check.py --device cuda --full-size     # bf16, the real architecture (bench/gpu_check.sh)
    .venv/bin/python bench/slots_check.py --model-path DIR    # float32 on the CPU (a quick run of the same check)

The model's output head is sharpened (multiplied by --head-scale) so that random weights give
greedy margins above bf16's rounding, as a trained model's are; what is left are near-ties. Each
page runs alone through generate() (the reference) and all pages together through the slots
decoder with fewer slots than pages, so that rows join mid-flight (and, on a GPU, through the
captured CUDA graphs). For a page whose tokens differ, it names the first differing step and its
cause: the n-gram guard banning one of the two tokens, or the two tokens' logits (recomputed
without any cache, in the model's dtype) being within rounding of each other: a near-tie that
different kernels and reduction orders may break either way. With --compile BACKEND the same pages
go through the slots decoder again with its step compiled (DECODE_COMPILE: inductor; aot_eager on
a CPU traces it without generating code), against the same reference, into "compiled".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.figures import write_figures  # noqa: E402 (the repository is put on the path just above)
from bench.server_bench import decoded_pages, page, write_model  # noqa: E402 (the repository is put on the path just above)
from bench.slot_steps import use_compiled  # noqa: E402 (the same)

SIZES = [(1024, 1024), (640, 640), (1600, 800), (800, 1600), (1400, 1400), (900, 700), (2000, 1000), (700, 1800)]


def cause(engine, item, reference: list[int], got: list[int], at: int) -> str:
    """Why the two decoders chose differently at step `at` of this page."""
    import torch

    from ocr_server.engines.transformers.ngram_guard import WindowedNoRepeatNGram

    a, b = reference[at] if at < len(reference) else None, got[at] if at < len(got) else None
    if a is None or b is None:
        return f"one decoder stopped at step {at} (EOS or budget) and the other went on"
    n, window, white = engine.ngram_settings(item)
    guard = WindowedNoRepeatNGram(0, n, window, white, rows=[(n, window, white)])
    scores = guard(torch.tensor([reference[:at]], dtype=torch.long).reshape(1, -1), torch.zeros(1, engine.model.config.text_config.vocab_size))
    banned = {t for t in (a, b) if scores[0, t] == -float("inf")}
    if banned:
        return f"the n-gram guard bans {sorted(banned)} after the common prefix"
    inputs = engine.collate([item])
    prefix = torch.tensor([reference[:at]], dtype=torch.long, device=inputs["input_ids"].device)
    inputs["input_ids"] = torch.cat([inputs["input_ids"], prefix], dim=1)
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    with torch.inference_mode():
        logits = engine.model(**inputs, logits_to_keep=1).logits[0, -1].float()
    la, lb = float(logits[a]), float(logits[b])
    ulp = torch.finfo(engine.model.dtype).eps * max(abs(la), abs(lb))
    tie = abs(la - lb) <= 4 * ulp
    return (f"logits without cache: generate's token {a} {la:.4f}, slots' token {b} {lb:.4f}, margin {la - lb:+.4f} "
            f"({abs(la - lb) / ulp:.1f} units of {engine.model.dtype} rounding at this magnitude): "
            + ("a near-tie, broken differently by different kernels" if tie else "NOT a near-tie: look for a bug"))


def compare(engine, images: list, prep, reference: list, into: dict, save) -> None:
    """All pages together through the slots decoder, each page's tokens against its reference,
    into `into["pages"]` and `into["identical_pages"]`, saved after each page."""
    items = [prep(im) for im in images]
    for i, (item, r, g) in enumerate(zip(items, reference, engine.generate_batch(items))):
        same = r.token_ids == g.token_ids and r.finished == g.finished
        entry = {"page": i, "size": list(images[i].size), "crops": item.plan.crops, "tokens": len(r.token_ids), "identical": same}
        if not same:
            at = next((k for k, (x, y) in enumerate(zip(r.token_ids, g.token_ids)) if x != y), min(len(r.token_ids), len(g.token_ids)))
            entry.update({"first_divergence": at, "cause": cause(engine, prep(images[i]), r.token_ids, g.token_ids, at)})
        into["pages"].append(entry)
        into["identical_pages"] = sum(e["identical"] for e in into["pages"])
        save()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--full-size", action="store_true", help="the real architecture, random bf16 weights (GPU)")
    p.add_argument("--model-path", help="a model directory (native or official layout) instead of writing one")
    p.add_argument("--pages", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--slots", type=int, default=4, help="DECODE_SLOTS: fewer than --pages, so rows join mid-flight")
    p.add_argument("--head-scale", type=float, default=50.0)
    p.add_argument("--experts", default="auto", help="EXPERTS of the slots decoder (generate() decodes with batched_mm on a GPU)")
    p.add_argument("--compile", metavar="BACKEND", default="",
                   help="then the slots decoder again with its step compiled by this torch.compile backend (inductor)")
    p.add_argument("--json", help="also write the result to this file, as it grows (\"complete\": false until the end)")
    args = p.parse_args()
    if args.full_size and args.device != "cuda":
        p.error("--full-size needs --device cuda")
    if not args.full_size and not args.model_path:
        p.error("give --model-path, or --full-size on a GPU")

    import torch

    from ocr_server.runtime.config import load_config
    from ocr_server.engines.transformers.engine import Engine

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model_path) if args.model_path else write_model(Path(tmp) / "model", True, "native")
        engine = Engine(load_config(env={"MODEL_PATH": str(model_dir), "DEVICE": args.device, "DECODER": "slots",
                                         "DECODE_SLOTS": str(args.slots), "MAX_NEW_TOKENS": str(args.new_tokens),
                                         "MAX_VISUAL_TOKENS": "1120", "EXPERTS": args.experts}))
        engine.load()
        with torch.no_grad():
            engine.model.lm_head.weight.mul_(args.head_scale)
        images = decoded_pages([page(w, h, seed=i) for i, (w, h) in enumerate((SIZES * 4)[:args.pages])])
        prep = lambda im: engine.prepare(im, prompt_mode="markdown", max_visual_tokens=None, max_new_tokens=args.new_tokens)  # noqa: E731
        engine.slots.run([prep(images[0])])  # warm-up, then the graphs (GPU)
        result = {"device": args.device, "dtype": str(engine.model.dtype), "head_scale": args.head_scale, "experts": args.experts,
                  "slots": args.slots, "capture_s": engine.slots.capture(), "graphs": len(engine.slots.graphs),
                  "complete": False, "identical_pages": 0, "pages": []}
        t = time.perf_counter()
        reference = []
        for im in images:  # each page alone; the count so far is written, in case the run is cut
            reference.append(engine.generate_reference([prep(im)])[0])
            result.update(generate_s=time.perf_counter() - t, generated_alone=len(reference))
            write_figures(args.json, result)
        t = time.perf_counter()
        compare(engine, images, prep, reference, result, lambda: write_figures(args.json, result))
        result["slots_s"] = time.perf_counter() - t
        result["complete"] = True
        if args.compile:  # after the main figures: the compile's time on a GPU's host is not known yet
            compiled = result["compiled"] = {"backend": args.compile, "complete": False, "identical_pages": 0, "pages": []}
            write_figures(args.json, result)
            compiled.update(use_compiled(engine.slots, args.compile))
            t = time.perf_counter()
            compare(engine, images, prep, reference, compiled, lambda: write_figures(args.json, result))
            compiled.update(slots_s=time.perf_counter() - t, complete=True)
    write_figures(args.json, result)
    pages = result["pages"]
    print(json.dumps(result, indent=2))
    print(f"\n{result['identical_pages']}/{len(pages)} pages identical ({result['dtype']}, head x{args.head_scale:g}, "
          f"{args.slots} slots, {result['graphs']} graphs); generate {result['generate_s']:.1f} s alone, slots {result['slots_s']:.1f} s together")
    print_divergences(pages)
    if c := result.get("compiled"):
        print(f"compiled step ({c['backend']}, {'kept' if c['compiled'] else 'fell back to eager'}, {c['attention']} attention): "
              f"{c['identical_pages']}/{len(c['pages'])} pages identical")
        print_divergences(c["pages"])
    return 0


def print_divergences(pages: list[dict]) -> None:
    for e in pages:
        if not e["identical"]:
            print(f"  page {e['page']} ({e['crops']} crops): first divergence at step {e['first_divergence']}: {e['cause']}")


if __name__ == "__main__":
    raise SystemExit(main())
