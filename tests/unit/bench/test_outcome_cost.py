"""bench/outcome_cost.py classifies its crafted pages as what they are and reports each page's cost."""

from __future__ import annotations

import json

from bench.outcome_cost import main


def test_the_bench_classifies_its_pages_and_writes_microseconds_per_page(tmp_path):
    out = tmp_path / "o.json"
    assert main(["--tokens", "2048", "--repeat", "3", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    outcomes = {name: page["outcome"] for name, page in figures["pages"].items()}
    assert outcomes == {"prose": "truncated", "loop": "loop", "short": "truncated"}
    assert all(page["median_us"] > 0 for page in figures["pages"].values())
