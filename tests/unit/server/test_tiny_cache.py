"""The cache of tiny models (ocr_server_testing.tiny_cache): a variant is written once per version
of its generator, by the generator in a process of its own, and copied from there after.

One write for the module (about 15 s of CPU): a cache in a folder of its own, holding a folder of an
older generator version, into which the first test's variant is written."""

from __future__ import annotations

import os

import pytest

from ocr_server_testing import tiny_cache
from ocr_server.engines.tiny_marker import TINY_MARKER

STALE = "0123456789abcdef"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    home = tmp_path_factory.mktemp("xdg")
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(home)
    root = home / "causalflow-ocr" / "tiny-models"
    (root / STALE / "native-seed3").mkdir(parents=True)
    (root / STALE / "native-seed3" / "README.md").write_text("an older generator's model")
    try:
        first = tiny_cache.cached(seed=3)
        yield root, first, {p.name: p.stat().st_mtime_ns for p in first.iterdir()}
    finally:
        if before is None:
            os.environ.pop("XDG_CACHE_HOME", None)
        else:
            os.environ["XDG_CACHE_HOME"] = before


def test_a_variant_is_written_once_and_then_read_from_the_cache(cache):
    root, first, written = cache
    again = tiny_cache.cached(seed=3)
    assert again == first == root / tiny_cache.generator_hash() / "native-seed3"
    assert TINY_MARKER in (first / "README.md").read_text() and (first / "config.json").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in again.iterdir()} == written  # not written again


def test_a_copy_is_the_callers_to_change_and_leaves_the_cache_as_it_was(cache, tmp_path):
    copy = tiny_cache.copy_to(tmp_path / "mine", seed=3)
    (copy / "config.json").write_text("{}")
    assert (tiny_cache.cached(seed=3) / "config.json").read_text() != "{}"


def test_writing_a_new_generator_version_removes_the_older_ones(cache):
    root, _, _ = cache
    assert not (root / STALE).exists()


def test_the_variants_are_named_by_the_generators_arguments():
    assert tiny_cache.variant() == "native-seed0"
    assert tiny_cache.variant("official", seed=1) == "official-seed1"
    assert tiny_cache.variant(for_vllm=True) == "for-vllm-seed0"
    assert tiny_cache.variant(loop=True) == "native-seed0-loop"
    with pytest.raises(ValueError, match="layout"):
        tiny_cache.variant("hub")
