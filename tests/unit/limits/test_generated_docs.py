"""The server configuration page's limits table is the one hack/gen-limits-table.py writes."""

from __future__ import annotations

from pathlib import Path

from tests import hack_scripts

ROOT = Path(__file__).resolve().parents[3]


def _generator():
    return hack_scripts.load("gen-limits-table.py")


def test_the_server_limits_table_in_the_docs_is_up_to_date():
    gen = _generator()
    page = gen.PAGE.read_text()
    assert gen.splice(page, gen.table()) == page, (
        "docs/reference/server-configuration.md: the server-limits table is stale: "
        "run .venv/bin/python hack/gen-limits-table.py")


def test_the_table_states_the_engine_dependent_token_cap_and_the_token_steps():
    table = _generator().table()
    assert "`1024` (transformers), `1120` (vllm)" in table
    assert "`256`, `544`, `688`, `832`, `976`, `1120`" in table
    assert "`spec.inference.maxVisualTokens`" in table
