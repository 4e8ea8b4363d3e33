"""The filesystem Store, on a real directory (ocr_batch_worker.storage.FileStore)."""

import os

import pytest

from ocr_batch_worker.storage import FileStore, ObjectTooLarge, Store, StoreError, TooManyObjects


@pytest.fixture
def store(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.pdf").write_bytes(b"22")
    (tmp_path / "a.png").write_bytes(b"1")
    (tmp_path / "c.tif").write_bytes(b"333")
    return FileStore(tmp_path)


def test_it_is_a_store():
    assert isinstance(FileStore("/x"), Store)


def test_list_gives_relative_keys_with_sizes_sorted(store):
    assert store.list(10) == [("a.png", 1), ("b/two.pdf", 2), ("c.tif", 3)]


def test_list_skips_hidden_files_and_symbolic_links(store, tmp_path):
    (tmp_path / ".tmp-123").write_bytes(b"partial")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "x").write_bytes(b"x")
    (tmp_path / "link.pdf").symlink_to("/etc/hostname")
    assert [k for k, _ in store.list(10)] == ["a.png", "b/two.pdf", "c.tif"]


def test_list_refuses_more_objects_than_its_limit(store):
    with pytest.raises(TooManyObjects, match="more than 2 files"):
        store.list(2)


def test_list_of_a_missing_directory_is_an_error(tmp_path):
    with pytest.raises(StoreError, match="is not a directory"):
        FileStore(tmp_path / "nope").list(10)


def test_get_refuses_an_object_larger_than_max_bytes_naming_its_size(store, tmp_path):
    with open(tmp_path / "huge.pdf", "wb") as f:
        f.truncate(8 * 1024**3)  # sparse: reading it would take long and 8 GiB
    with pytest.raises(ObjectTooLarge, match=f"huge.pdf is {8 * 1024**3} bytes; the limit is 1000"):
        store.get("huge.pdf", 1000)


def test_get_returns_the_bytes_and_a_missing_key_is_an_error(store):
    assert store.get("b/two.pdf", 2) == b"22"
    with pytest.raises(StoreError, match="nope.pdf does not exist"):
        store.get("nope.pdf", 10)


@pytest.mark.parametrize("key", ["../etc/passwd", "/etc/passwd", "a//b", "a/./b", ""])
def test_a_key_that_could_leave_the_root_is_refused(store, key):
    with pytest.raises(StoreError, match="invalid key"):
        store.get(key, 10)


def test_put_replaces_atomically_and_leaves_no_temporary_file(store, tmp_path):
    store.put("results/x/y.jsonl", b"old")
    store.put("results/x/y.jsonl", b"new")
    assert store.get("results/x/y.jsonl", 10) == b"new"
    assert os.listdir(tmp_path / "results" / "x") == ["y.jsonl"]


def test_put_into_an_unwritable_directory_is_a_store_error(store, tmp_path):
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "f").write_bytes(b"")  # a file where put needs a directory
    with pytest.raises(StoreError, match="cannot be written"):
        store.put("ro/f/g.json", b"x")


def test_exists_says_whether_an_object_is_there(store):
    assert store.exists("b/two.pdf") and not store.exists("b") and not store.exists("zzz")


def test_a_name_longer_than_the_filesystem_takes_is_refused_before_writing(store):
    with pytest.raises(StoreError, match="longer than 255 bytes"):
        store.exists("results/" + "n" * 256 + ".jsonl")
