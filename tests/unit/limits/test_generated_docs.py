"""The server configuration page's limits table is the one `make generate` writes from ocr_limits."""

from __future__ import annotations

from pathlib import Path

from hack import limits_table
from tests import hack_scripts

ROOT = Path(__file__).resolve().parents[3]


def test_the_server_limits_table_in_the_docs_is_up_to_date():
    gen = hack_scripts.load("generate.py")
    page = gen.SERVER_CONFIGURATION
    assert gen.outputs(ROOT)[page] == (ROOT / page).read_text(), (
        "docs/reference/server-configuration.md: the server-limits table is stale: run make generate")


def test_the_table_states_the_engine_dependent_token_cap_and_the_token_steps():
    table = limits_table.table()
    assert "`1024` (transformers), `1120` (vllm)" in table
    assert "`256`, `544`, `688`, `832`, `976`, `1120`" in table
    assert "`spec.inference.maxVisualTokens`" in table
