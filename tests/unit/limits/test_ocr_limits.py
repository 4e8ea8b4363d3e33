"""The shared limits: the model's visual-token arithmetic, the engine defaults, the settings table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ocr_limits as L

PACKAGE = Path(L.__file__).parent


def test_a_view_costs_one_token_per_64_px_square():
    assert (L.view_tokens(768), L.view_tokens(1024)) == (144, 256) == (L.CROP_TOKENS, L.GLOBAL_TOKENS)


def test_a_page_costs_the_global_view_plus_144_per_crop_with_0_or_2_to_6_crops():
    assert L.CROP_COUNTS == (0, 2, 3, 4, 5, 6)
    assert L.TOKEN_STEPS == (256, 544, 688, 832, 976, 1120)
    assert (L.TOKEN_FLOOR, L.TOKEN_CEILING) == (256, 1120)


@pytest.mark.parametrize("tokens, crops", [(256, 0), (399, 0), (543, 0), (544, 2), (687, 2), (688, 3), (1024, 5),
                                           (1120, 6), (5000, 6)])
def test_a_token_cap_allows_the_most_crops_that_fit_and_never_one(tokens, crops):
    assert L.crops_allowed(tokens) == crops


@pytest.mark.parametrize("tokens, crops", [(100, 0), (256, 0), (257, 2), (544, 2), (545, 3), (1120, 6), (1121, 7)])
def test_a_token_floor_demands_the_fewest_crops_that_reach_it_and_at_least_two(tokens, crops):
    assert L.crops_required(tokens) == crops


def test_a_budget_fits_when_some_crop_count_lies_between_floor_and_cap():
    assert L.token_budget_fits(256, 256) and L.token_budget_fits(545, 688) and L.token_budget_fits(1120, 1120)
    assert not L.token_budget_fits(600, 650) and not L.token_budget_fits(257, 543)


def test_choosing_the_engine_alone_gives_a_token_cap_that_engine_serves():
    for engine in L.ENGINES:
        limits = L.engine_limits(engine)
        cap = L.default_max_visual_tokens(engine)
        assert limits.fixed_max_visual_tokens in (None, cap), engine
        assert L.TOKEN_FLOOR <= cap <= L.TOKEN_CEILING
    assert (L.default_max_visual_tokens("transformers"), L.default_max_visual_tokens("vllm")) == (1024, 1120)


def test_vllm_serves_only_its_processors_fixed_crop_rule():
    assert L.VLLM.fixed_max_visual_tokens == 1120 and L.VLLM.highest_min_visual_tokens == 544
    assert L.VLLM.fixed_sizes == (768, 1024)
    assert L.TRANSFORMERS.fixed_max_visual_tokens is None and L.TRANSFORMERS.fixed_sizes is None


def test_an_unknown_engine_defaults_like_the_default_engine_so_validation_can_name_it():
    assert L.default_max_visual_tokens("tensorrt") == L.default_max_visual_tokens(L.DEFAULT_ENGINE)


def test_every_setting_has_one_env_name_and_a_default_within_its_bounds():
    assert len({s.env for s in L.SETTINGS}) == len(L.SETTINGS)
    for s in L.SETTINGS:
        if s.default is None:
            continue
        if s.choices:
            assert s.default in s.choices, s.env
        if s.minimum is not None:
            assert s.minimum <= s.default <= s.maximum, s.env


def test_every_setting_names_one_key_of_the_servers_config_file():
    settings = L.SETTINGS + L.SERVER_SETTINGS
    keys = [s.key for s in settings]
    assert len(set(keys)) == len(keys)
    for key in keys:
        section, name = key.split(".")
        assert section in ("service", "model", "runtime") and name.islower(), key
    assert L.setting("MAX_VISUAL_TOKENS").key == "model.max_visual_tokens"


def test_the_package_imports_the_standard_library_itself_and_rapidfuzz_for_the_page_distance_only():
    imported: dict[str, set[str]] = {}
    for source in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = {node.module.split(".")[0]}
            else:
                continue
            for name in names:
                imported.setdefault(name, set()).add(source.name)
    assert set(imported) <= {"__future__", "dataclasses", "datetime", "math", "threading", "time", "typing", "rapidfuzz"}, imported
    assert imported.get("rapidfuzz", {"quality.py"}) == {"quality.py"}
