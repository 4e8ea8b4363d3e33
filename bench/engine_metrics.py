"""What the server's engine did during one client level, read from two scrapes of its /metrics
(bench/server_bench.py): how many pages joined each prefill, how busy the engine thread was, and
the rows and host time of its decode steps.

Why: the raw engine takes the 64 pages it was handed up to `prefill_pages` at a time and is never
idle; behind HTTP the pages reach the engine as its preprocessing workers finish them. On the H200
(2026-12-04) the server ran 28 % below the raw engine at 64 clients, and these figures say which of
the two explanations holds: small prefills (pages trickling in one or two at a time) or an idle
engine (waiting for pages), against a busy engine whose steps got slower (the host's interpreter
shared with the preprocessing threads).
"""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def scrape(text: str) -> dict[str, float]:
    """The engine's series in a /metrics text: prefills and their pages, decode steps and their
    rows, busy seconds by work (absent series: 0)."""
    got = {"prefills": 0.0, "prefill_pages": 0.0, "steps": 0.0, "step_rows": 0.0}
    wanted = {"ocr_prefill_pages_count": "prefills", "ocr_prefill_pages_sum": "prefill_pages",
              "ocr_batch_size_count": "steps", "ocr_batch_size_sum": "step_rows"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                got[wanted[sample.name]] = sample.value
            elif sample.name == "ocr_engine_busy_seconds_total":
                got[f"busy_{sample.labels['work']}_s"] = sample.value
    return got


def level_figures(before: dict[str, float], after: dict[str, float], wall_s: float) -> dict[str, float]:
    """The engine's figures over one level (pure): the differences of two scrapes over its wall time.
    busy_share is the engine thread's busy time over the level's wall time (1: never idle)."""
    d = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after.keys() | before.keys()}
    busy = sum(v for k, v in d.items() if k.startswith("busy_"))
    out = {"prefills": d["prefills"], "busy_share": busy / wall_s if wall_s > 0 else 0.0}
    if d["prefills"]:
        out["pages_per_prefill"] = d["prefill_pages"] / d["prefills"]
        out["prefill_busy_ms_per_page"] = 1000 * d.get("busy_prefill_s", 0.0) / d["prefill_pages"]
    if d["steps"]:
        out["rows_per_step"] = d["step_rows"] / d["steps"]
        out["decode_busy_ms_per_step"] = 1000 * d.get("busy_decode_s", 0.0) / d["steps"]
    return out


def line(f: dict[str, float]) -> str:
    """One level's figures in words, for the bench's report."""
    parts = [f"engine busy {f['busy_share']:.0%}"]
    if "pages_per_prefill" in f:
        parts.append(f"{f['pages_per_prefill']:.1f} pages a prefill ({f['prefill_busy_ms_per_page']:.1f} ms a page)")
    if "rows_per_step" in f:
        parts.append(f"{f['rows_per_step']:.1f} rows a step ({f['decode_busy_ms_per_step']:.2f} ms)")
    return ", ".join(parts)
