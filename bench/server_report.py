"""bench/server_bench.py's closing table: each engine's paths, server levels and variants, and the
raw engine's prefill and step figures; what a run did not measure is left out."""

from __future__ import annotations

from bench.engine_metrics import line as engine_line


def line(name: str, f: dict) -> str:
    return f"  {name:<22} {f['pages_per_s']:.3f} pages/s  {f['tokens_per_s']:.1f} tokens/s  p50 {f['p50_s']:.2f}s  p95 {f['p95_s']:.2f}s"


def report(figures: dict, args) -> None:
    """The figures as a table; what a run did not measure (another --paths, a cut run) is left out."""
    for engine, got in figures["engines"].items():
        server = got.get("server", {})
        levels = [c for c in args.clients if f"clients_{c}" in server]
        crops = server[f"clients_{levels[0]}"]["layout"]["crops"] if levels else "?"
        print(f"\n{engine}: layout {crops} crops, {args.new_tokens} new tokens per page, {args.images} pages "
              f"(sequential and generate: {args.reference_pages or args.images}; the server at n clients: max(8, 2n))")
        raw_key = "slots" if engine == "transformers" else "raw"
        for path in ("sequential", "generate", raw_key):
            if path in got:
                per_prefill = got[path].get("pages_per_prefill")
                print(line(path, got[path]) + (f"; {per_prefill:.1f} pages a prefill" if per_prefill else ""))
        for clients in levels:
            f = server[f"clients_{clients}"]
            vs = f"  ({got[raw_key]['pages_per_s'] / f['pages_per_s'] - 1:+.1%} vs {raw_key})" if raw_key in got else ""
            print(line(f"server, {clients} clients", f) + vs
                  + f"; preprocessing p50 {f['preprocess_ms_p50']:.1f} ms, {f['preprocess_share']:.1%} of the requests' time"
                  + (f"; {engine_line(f['engine'])}" if "engine" in f else ""))
        for variant, figures in server.get("variants", {}).items():
            for key, f in figures.items():
                if key.startswith("clients_"):
                    print(line(f"  with {variant}, {key.split('_')[1]} clients", f)
                          + f"; preprocessing p50 {f['preprocess_ms_p50']:.1f} ms"
                          + (f"; {engine_line(f['engine'])}" if "engine" in f else ""))
        for k, f in got.get("prefill_ms_per_page", {}).items():
            print(f"  vision+prefill per page, {k} together: p50 {f['p50']:.1f} ms, max {f['max']:.1f} ms")
        for impl, times in got.get("step_ms", {}).items():
            print(f"  ms per decode step ({impl}): " + ", ".join(f"{b} rows {ms:.2f}" for b, ms in times.items()))
        if "capture_s" in got:
            print(f"  decode graphs captured in {got['capture_s']:.1f} s; KV {got['kv_mib_per_slot']:.0f} MiB per slot x {got['slot_count']}"
                  + (f"; GPU memory peak {got['gpu_memory_peak_gib']:.1f} GiB" if "gpu_memory_peak_gib" in got else ""))
