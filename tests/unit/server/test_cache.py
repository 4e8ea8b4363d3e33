"""The result cache: one tenant (API key) never sees another's entries, and it is bounded in bytes."""

from __future__ import annotations

import pytest

from ocr_server.serving.cache import ResultCache, cache_key, entry_size, tenant_id
from ocr_server.runtime.config import ConfigError, load_config


def test_the_same_document_under_two_api_keys_has_two_cache_keys():
    a, b = tenant_id("key-of-tenant-a"), tenant_id("key-of-tenant-b")
    assert cache_key(b"doc", {}, "rev", a) != cache_key(b"doc", {}, "rev", b)
    assert cache_key(b"doc", {}, "rev", a) == cache_key(b"doc", {}, "rev", tenant_id("key-of-tenant-a"))


def test_the_tenant_is_a_hash_of_the_key_never_the_key():
    assert "key-of-tenant-a" not in tenant_id("key-of-tenant-a") and len(tenant_id("key-of-tenant-a")) == 64
    assert tenant_id(None) == "" and tenant_id("") == ""


def test_entries_are_evicted_oldest_first_past_the_byte_bound():
    value = {"raw": "x" * 1000}
    size = entry_size(value)
    cache = ResultCache(max_entries=100, max_bytes=3 * size)
    for i in range(5):
        cache.put(f"k{i}", value)
    assert len(cache) == 3 and cache.bytes <= 3 * size
    assert cache.get("k0") is None and cache.get("k4") == value


def test_an_entry_larger_than_the_byte_bound_is_not_kept():
    cache = ResultCache(max_entries=100, max_bytes=100)
    cache.put("big", {"raw": "x" * 1000})
    assert len(cache) == 0 and cache.bytes == 0


def test_replacing_an_entry_counts_its_bytes_once():
    cache = ResultCache(max_entries=100, max_bytes=10_000)
    cache.put("k", {"raw": "x" * 100})
    cache.put("k", {"raw": "x" * 100})
    assert cache.bytes == entry_size({"raw": "x" * 100})


def test_the_byte_bound_is_a_setting_that_names_its_key():
    assert load_config(env={}).service.cache_max_bytes == 64 * 1024 * 1024
    assert load_config(env={"CACHE_MAX_BYTES": "1000"}).service.cache_max_bytes == 1000
    with pytest.raises(ConfigError, match="CACHE_MAX_BYTES=-1 is not allowed"):
        load_config(env={"CACHE_MAX_BYTES": "-1"})


def test_a_document_cached_for_one_api_key_is_not_a_hit_for_another():
    import asyncio

    from ocr_server.serving.schema import OcrOptions
    from tests.server import samples
    from tests.unit.server.test_preprocess_deadline import _serving

    async def scenario() -> list[bool]:
        serving = _serving()
        doc = samples.png(64, 64, seed=11)
        a, b = tenant_id("key-of-tenant-a"), tenant_id("key-of-tenant-b")
        out = [(await serving.ocr(doc, OcrOptions(), tenant=t)).cached for t in (a, b, a, b)]
        await serving.stop()
        return out

    assert asyncio.run(scenario()) == [False, False, True, True]
