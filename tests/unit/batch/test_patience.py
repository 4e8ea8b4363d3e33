"""Storage faults waited out within a budget (ocr_batch_worker.patience), on real stores: the
real S3 server (versitygw) stopped and started again, and a volume that reports ENOSPC."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
import uuid

import boto3
import pytest

from localcluster.s3server import S3Server, gateway_argv, gateway_env, listen_addresses, versitygw_binary
from ocr_batch_worker.patience import Backoff, Outage, PatientStore, StorageUnavailable
from ocr_batch_worker.s3 import S3Store, S3Unavailable, S3Unreachable, error_type
from ocr_batch_worker.storage import FileStore, StoreError, TransientStoreError, os_error
from tests.unit.clock import ManualClock


def test_an_outage_is_measured_from_its_first_failure_and_ended_by_any_success():
    clock = ManualClock(100.0)
    outage = Outage(10, clock)
    assert outage.failed() == 10
    clock.now += 4
    assert outage.failed() == 6
    outage.ok()
    clock.now += 100
    assert outage.failed() == 10  # a new outage, a whole budget


def test_the_backoff_grows_exponentially_to_its_cap_with_jitter():
    b = Backoff(base_seconds=0.5, cap_seconds=30)
    assert [b.delay(a, 1.0) for a in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert b.delay(3, 0.0) == 2.0


def test_no_wait_between_two_tries_is_longer_than_ten_seconds_by_default():
    assert max(Backoff().delay(a, 1.0) for a in range(40)) == 10.0


class DownUntil(FileStore):
    """A real folder whose volume fails every operation until `up` is set (EIO from the kernel's
    own error), as a storage that is down and comes back."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.up = threading.Event()

    def put(self, key: str, data: bytes) -> None:
        if not self.up.is_set():
            raise os_error(key, "written", OSError(errno.EIO, os.strerror(errno.EIO)))
        super().put(key, data)


def test_an_operation_waiting_out_an_outage_tries_again_as_soon_as_another_sees_the_storage_back(tmp_path):
    store = DownUntil(tmp_path)
    outage = Outage(600)
    waiting = PatientStore(store, outage, Backoff(60, 60))  # asleep for a minute after its first failure
    done = threading.Event()
    threading.Thread(target=lambda: (waiting.put("a", b"x"), done.set()), daemon=True).start()
    time.sleep(0.3)
    assert not done.is_set()
    store.up.set()
    start = time.monotonic()
    PatientStore(store, outage).put("b", b"y")  # another operation of the worker: the storage answers
    assert done.wait(5), "the sleeping operation was not woken by the storage's return"
    assert time.monotonic() - start < 5 and (tmp_path / "a").read_bytes() == b"x"


@pytest.mark.parametrize("code, status, kind", [("SlowDown", 503, S3Unavailable), ("InternalError", 500, S3Unavailable),
                                                ("", 502, S3Unavailable), ("RequestTimeout", 400, S3Unavailable),
                                                ("NoSuchKey", 404, None), ("AccessDenied", 403, None)])
def test_s3_throttling_and_server_failures_are_transient_and_nothing_else(code, status, kind):
    got = error_type(code, status)
    assert issubclass(got, TransientStoreError) == (kind is not None)
    assert S3Unreachable.__mro__.count(TransientStoreError) == 1


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.ESTALE])
def test_a_full_or_failing_volume_is_transient_and_a_refused_one_is_not(code):
    assert isinstance(os_error("k", "written", OSError(code, os.strerror(code))), TransientStoreError)
    assert not isinstance(os_error("k", "written", OSError(errno.EACCES, "denied")), TransientStoreError)


class FullForAWhile(FileStore):
    """A real folder whose volume is full for the first `full` writes (ENOSPC from the kernel's
    own error, as a full PVC gives it)."""

    def __init__(self, root, full: int) -> None:
        super().__init__(root)
        self.full = full

    def put(self, key: str, data: bytes) -> None:
        if self.full > 0:
            self.full -= 1
            raise os_error(key, "written", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
        super().put(key, data)


def test_a_full_volume_is_waited_out_and_the_write_lands(tmp_path):
    store = PatientStore(FullForAWhile(tmp_path, full=3), Outage(30), Backoff(0.01, 0.05))
    store.put("a/b.json", b"x")
    assert (tmp_path / "a" / "b.json").read_bytes() == b"x"


def test_past_the_budget_the_store_says_the_storage_is_unavailable(tmp_path):
    store = PatientStore(FullForAWhile(tmp_path, full=10**6), Outage(0.3), Backoff(0.05, 0.1))
    start = time.monotonic()
    with pytest.raises(StorageUnavailable, match=r"more than 0.3 s \(spec.limits.storageRetrySeconds\); last: "
                                                 r"a cannot be written: No space left on device"):
        store.put("a", b"x")
    assert 0.25 < time.monotonic() - start < 3


def test_a_missing_object_is_not_waited_for(tmp_path):
    store = PatientStore(FileStore(tmp_path), Outage(30))
    start = time.monotonic()
    with pytest.raises(StoreError, match="does not exist"):
        store.get("nope", 10)
    assert time.monotonic() - start < 1


def test_stop_ends_a_wait_at_once(tmp_path):
    outage = Outage(600)
    store = PatientStore(FullForAWhile(tmp_path, full=10**6), outage, Backoff(60, 60))
    threading.Timer(0.3, outage.stop).start()
    start = time.monotonic()
    with pytest.raises(StorageUnavailable, match="stopped"):
        store.put("a", b"x")
    assert time.monotonic() - start < 5


def restart_same_port(server: S3Server, down_seconds: float) -> None:
    """Stop the S3 server's process, keep its data and port, start it again after `down_seconds`."""
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=10)
    time.sleep(down_seconds)
    log = server.log_path.open("a")
    server.proc = subprocess.Popen(gateway_argv(versitygw_binary(), listen_addresses(server.hosts, server.port),
                                                server.root), stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL,
                                   env=gateway_env(server.access_key, server.secret_key, server.region,
                                                   server.dir / "tmp"))


def test_an_s3_outage_within_the_budget_is_waited_out_on_the_real_server():
    with S3Server() as s3:
        bucket = f"t-{uuid.uuid4().hex[:12]}"
        boto3.client("s3", endpoint_url=s3.endpoint, aws_access_key_id=s3.access_key,
                     aws_secret_access_key=s3.secret_key, region_name=s3.region).create_bucket(Bucket=bucket)
        store = PatientStore(S3Store(s3.endpoint, bucket, "out/", s3.access_key, s3.secret_key), Outage(60),
                             Backoff(0.2, 1.0))
        store.put("before", b"1")
        outage = threading.Thread(target=restart_same_port, args=(s3, 4.0))
        outage.start()
        time.sleep(0.5)  # the server is down now
        start = time.monotonic()
        store.put("during", b"2")
        waited = time.monotonic() - start
        outage.join()
        assert store.get("during", 10) == b"2" and store.get("before", 10) == b"1"
        assert waited > 2.5, waited  # it was written after the server came back, not before


def test_an_s3_outage_past_the_budget_stops_with_storage_unavailable():
    with S3Server() as s3:
        endpoint = s3.endpoint
    store = PatientStore(S3Store(endpoint, "bucket", "out/", "key", "secret"), Outage(1.0), Backoff(0.1, 0.2))
    with pytest.raises(StorageUnavailable, match="no answer from"):
        store.put("x", b"1")
