"""The model fetcher (ocr_server.fetch) against a real S3 server: versitygw with its POSIX backend
(localcluster/s3server.py). One server for the module, one bucket and one cache per test."""

from __future__ import annotations

import io
import json
import os
import signal
import threading

import pytest

from localcluster.s3server import S3Server
from ocr_server.fetch import CHECKSUM_MISMATCH, FETCH_FAILED, FetchError
from ocr_server.fetch.cache import Cache, key_of
from ocr_server.fetch.fetcher import Fetch
from ocr_server.fetch.report import Reporter

from .fetch_support import WEIGHTS, checksums, gets, lines, reporter, settings, sha, upload


@pytest.fixture(scope="module")
def s3():
    with S3Server(access_log=True) as server:
        yield server


def fetch(s, tmp):
    rep, out = reporter(tmp)
    return Fetch(s, rep).run(), out


def test_weights_are_fetched_verified_published_under_their_key_and_linked_for_the_server(s3, tmp_path):
    bucket = upload(s3)
    path, out = fetch(settings(s3, bucket, tmp_path, given=checksums()), tmp_path)
    assert path == tmp_path / "cache" / key_of(checksums())
    for name, data in WEIGHTS.items():
        assert (path / name).read_bytes() == data
    assert json.loads((path / "model-checksums.json").read_text()) == checksums()
    assert os.readlink(tmp_path / "models" / "org" / "tiny") == str(path)
    assert sorted(os.listdir(tmp_path / "cache" / ".staging")) == []  # published by a rename
    done = lines(out)[-1]
    assert done["event"] == "done" and done["cache"] == "miss" and done["percent"] == 100.0
    assert done["files"] == 3 and done["bytes"] == sum(map(len, WEIGHTS.values()))


def test_an_object_over_one_chunk_comes_in_ranged_parts(s3, tmp_path):
    bucket = upload(s3)
    before = len(gets(s3))
    fetch(settings(s3, bucket, tmp_path, given=checksums()), tmp_path)
    # 2 small files in one GET each, ~5 MiB in 1 MiB ranges: at least 5 more
    assert len(gets(s3)) - before >= 2 + 5


def test_a_cache_hit_with_spec_checksums_asks_the_store_nothing(s3, tmp_path):
    bucket = upload(s3)
    fetch(settings(s3, bucket, tmp_path, given=checksums()), tmp_path)
    before = len(s3.clients())
    path, out = fetch(settings(s3, bucket, tmp_path, given=checksums(), endpoint_url="http://127.0.0.1:9"), tmp_path)
    assert len(s3.clients()) == before
    assert lines(out)[-1]["cache"] == "hit" and (path / "model.safetensors").is_file()


def test_without_spec_checksums_the_list_beside_the_weights_is_used(s3, tmp_path):
    bucket = upload(s3, with_list=True)
    path, _ = fetch(settings(s3, bucket, tmp_path), tmp_path)
    assert path.name == key_of(checksums()) and (path / "sub" / "tokenizer.json").is_file()


def test_without_any_checksum_list_the_fetch_is_refused(s3, tmp_path):
    bucket = upload(s3)
    with pytest.raises(FetchError, match="no checksum list.*model-checksums.json does not exist") as err:
        fetch(settings(s3, bucket, tmp_path), tmp_path)
    assert err.value.reason == CHECKSUM_MISMATCH


def test_a_corrupted_object_is_refused_naming_the_file_and_nothing_is_published(s3, tmp_path):
    bucket = upload(s3, {**WEIGHTS, "model.safetensors": b"corrupted" + WEIGHTS["model.safetensors"][9:]})
    with pytest.raises(FetchError, match=r"model.safetensors from s3://.*/models/tiny/model.safetensors has sha256 "
                                         + r"\w+, spec.model.checksums expects " + checksums()["model.safetensors"]) as err:
        fetch(settings(s3, bucket, tmp_path, given=checksums()), tmp_path)
    assert err.value.reason == CHECKSUM_MISMATCH
    assert not (tmp_path / "cache" / key_of(checksums())).exists()
    assert not (tmp_path / "models").exists()


def test_an_object_the_list_does_not_name_is_refused(s3, tmp_path):
    bucket = upload(s3, {**WEIGHTS, "extra.bin": b"x"})
    with pytest.raises(FetchError, match="extra.bin has no sha256 in spec.model.checksums") as err:
        fetch(settings(s3, bucket, tmp_path, given=checksums()), tmp_path)
    assert err.value.reason == CHECKSUM_MISMATCH


def test_a_restarted_fetch_skips_verified_files_and_restarts_a_partial_one(s3, tmp_path):
    bucket = upload(s3)
    s = settings(s3, bucket, tmp_path, given=checksums())
    cache, key = Cache(s.cache_dir), key_of(checksums())
    stage = cache.staging(key)
    (stage / "sub").mkdir(parents=True)
    (stage / "config.json").write_bytes(WEIGHTS["config.json"])
    cache.record(key, {}, "config.json", sha(WEIGHTS["config.json"]))  # verified before the restart
    (stage / "model.safetensors.a1b2c3d4").write_bytes(b"part of a download")  # s3transfer's temporary file
    before = len(gets(s3))
    path, out = fetch(s, tmp_path)
    fetched = len(gets(s3)) - before
    assert fetched == 1 + 6  # tokenizer.json whole, the model in 6 ranges; config.json not again
    assert not (path / "model.safetensors.a1b2c3d4").exists() and (path / "config.json").is_file()
    assert {"event": "resumed", "verified_files": 1} in lines(out)


def test_wrong_credentials_are_a_fetch_failure_naming_the_secret(s3, tmp_path):
    bucket = upload(s3)
    with pytest.raises(FetchError, match="refused the credentials.*check the credentials Secret") as err:
        fetch(settings(s3, bucket, tmp_path, given=checksums(), secret_key="wrong"), tmp_path)
    assert err.value.reason == FETCH_FAILED and s3.secret_key not in str(err.value)


def test_more_objects_or_bytes_than_the_bounds_are_refused_before_any_download(s3, tmp_path):
    bucket = upload(s3)
    before = len(gets(s3))
    with pytest.raises(FetchError, match="holds more than 2 objects"):
        fetch(settings(s3, bucket, tmp_path, given=checksums(), max_objects=2), tmp_path)
    with pytest.raises(FetchError, match="holds more than 1000 bytes"):
        fetch(settings(s3, bucket, tmp_path, given=checksums(), max_total_bytes=1000), tmp_path)
    assert len(gets(s3)) == before


def test_least_recently_used_keys_are_evicted_past_the_cache_bound(s3, tmp_path):
    cache_dir = tmp_path / "cache"
    old = {"a.bin": b"a" * 4000}
    new = {"b.bin": b"b" * 4000}
    for files, hours_ago in ((old, 2), (new, 1)):
        path, _ = fetch(settings(s3, upload(s3, files), tmp_path, given=checksums(files), cache=cache_dir), tmp_path)
        os.utime(path, (path.stat().st_atime, path.stat().st_mtime - 3600 * hours_ago))
    path, out = fetch(settings(s3, bucket := upload(s3), tmp_path, given=checksums(), cache=cache_dir,
                               cache_max_bytes=sum(map(len, WEIGHTS.values())) + 5000), tmp_path)
    assert bucket and lines(out)[-1]["evicted"] == [key_of(checksums(old))]
    assert sorted(p.name for p in cache_dir.iterdir() if not p.name.startswith(".")) == sorted(
        [key_of(checksums(new)), key_of(checksums())])


def test_a_mismatch_while_other_objects_are_in_flight_still_names_the_file(s3, tmp_path):
    """The large object's transfer is held in flight (versitygw stopped at its first part, resumed a
    second later) while the small one's mismatch stops the fetch. The large one sorts first, so its
    parts are the first started."""
    files = {"z.json": b"{}", "a.safetensors": bytes(range(256)) * (16 * 4096)}  # 16 MiB in 1 MiB ranges
    bucket = upload(s3, {**files, "z.json": b"{ }"})

    class HoldsTheLargeObject(Reporter):
        def add_bytes(self, n: int) -> None:
            if n > 1000 and not getattr(self, "held", False):
                self.held = True
                os.kill(s3.pid, signal.SIGSTOP)
                threading.Timer(1.5, os.kill, (s3.pid, signal.SIGCONT)).start()
            super().add_bytes(n)

    rep = HoldsTheLargeObject(out=io.StringIO(), every=0, termination_log=None)
    with pytest.raises(FetchError, match="z.json from s3://.* has sha256") as err:
        Fetch(settings(s3, bucket, tmp_path, given=checksums(files), concurrency=2), rep).run()
    assert err.value.reason == CHECKSUM_MISMATCH and rep.held
