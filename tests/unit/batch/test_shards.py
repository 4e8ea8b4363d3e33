"""Which documents a Job index owns (ocr_batch_worker.shards)."""

import pytest

from ocr_batch_worker.shards import shard_of, take_shard

LISTING = [(f"docs/{i:03d}.pdf", i) for i in range(200)]


def test_every_document_is_owned_by_exactly_one_index():
    shards = [take_shard(LISTING, i, 4) for i in range(4)]
    owned = sorted(item for shard in shards for item in shard)
    assert owned == sorted(LISTING)
    assert all(shards)  # 200 names over 4 indices: none is empty


def test_a_document_added_or_removed_moves_no_other_document_to_another_index():
    before = {i: take_shard(LISTING, i, 4) for i in range(4)}
    changed = LISTING[1:] + [("docs/new.pdf", 7)]
    after = {i: take_shard(changed, i, 4) for i in range(4)}
    for i in range(4):
        assert set(before[i]) - {LISTING[0]} == set(after[i]) - {("docs/new.pdf", 7)}


def test_a_shard_is_in_key_order_whatever_the_listing_order():
    assert take_shard(list(reversed(LISTING)), 1, 3) == sorted(take_shard(LISTING, 1, 3))


def test_one_shard_owns_everything():
    assert take_shard(LISTING, 0, 1) == sorted(LISTING)


@pytest.mark.parametrize("index, shards", [(4, 4), (-1, 4)])
def test_an_index_outside_the_shards_is_refused(index, shards):
    with pytest.raises(ValueError, match="index"):
        take_shard(LISTING, index, shards)


def test_the_owner_depends_on_the_key_alone():
    assert shard_of("a/b.pdf", 7) == shard_of("a/b.pdf", 7) and 0 <= shard_of("a/b.pdf", 7) < 7
