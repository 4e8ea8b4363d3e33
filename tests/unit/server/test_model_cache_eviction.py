"""Which keys of the model cache an eviction may try (fetch/cache.py's eviction_order): pure."""

from __future__ import annotations

from ocr_server.fetch.cache import IN_USE_GRACE_SECONDS, eviction_order

NOW = 1_000_000.0


def test_a_key_fetched_or_hit_within_the_grace_is_not_evicted_its_server_may_not_hold_it_yet():
    keys = [(NOW - IN_USE_GRACE_SECONDS - 1, "sha256-old", 10), (NOW - IN_USE_GRACE_SECONDS + 1, "sha256-just", 10)]
    assert eviction_order(keys, keep="sha256-new", now=NOW) == [("sha256-old", 10)]


def test_keys_are_tried_least_recently_used_first_never_the_one_being_published():
    keys = [(NOW - 2 * 3600, "sha256-b", 2), (NOW - 3 * 3600, "sha256-a", 1), (NOW - 4 * 3600, "sha256-new", 3)]
    assert eviction_order(keys, keep="sha256-new", now=NOW) == [("sha256-a", 1), ("sha256-b", 2)]
