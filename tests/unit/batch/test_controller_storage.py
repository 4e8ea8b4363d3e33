"""The OcrBatch controller shows its workers' storage waits (controller._storage over storagewait.py,
against an in-memory API): a worker whose progress line carries a storage wait makes the batch's
StorageAvailable condition False with one Warning event per outage, True again once it ends, and
is not restarted for a stall while its tries go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from localcluster.ports import free_port
from ocr_batch_worker.contract import EXIT_STORAGE
from tests.unit.batch.test_controller_stall import World, deleted, pod

ROOT = Path(__file__).resolve().parents[3]

SINCE = 1_796_374_800.0  # 2026-12-04T09:00:00Z


def line(pages_done: int, retries: int | None = None, store: str = "output") -> str:
    report = {"index": 0, "shards": 1, "pages_done": pages_done, "documents_total": 3, "finished": False,
              "storage": None if retries is None else {"store": store, "waiting_since": SINCE, "retries": retries,
                                                       "last_error": "503 from https://s3.example.com"}}
    return ("2026-12-04 09:00:01 WARNING writing 'x' failed (...); again in 10.0 s\n"
            '{"progress": ' + json.dumps(report) + "}\n")


def storage_condition(status: dict) -> dict | None:
    return next((c for c in status.get("conditions") or () if c["type"] == "StorageAvailable"), None)


def warnings(result) -> list[str]:
    return [e[2] for e in result.events if e[:2] == ("Warning", "StorageUnavailable")]


def test_a_storage_wait_is_a_false_condition_and_one_warning_per_outage_true_again_when_it_ends():
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), line(5))
    assert not warnings(w.reconcile(1000)) and storage_condition(w.status) is None
    w.pod(pod("archive-0-a", "uid-a"), line(5, retries=1))
    (event,) = warnings(w.reconcile(1010))
    cond = storage_condition(w.status)
    assert (cond["status"], cond["reason"]) == ("False", "StorageUnavailable") and cond["message"] == event
    assert "the output storage has not answered since 2026-12-04T09:00:00Z" in event
    assert "503 from https://s3.example.com" in event and "1 tries failed" in event
    for t, retries in ((1020, 4), (1030, 9)):
        w.pod(pod("archive-0-a", "uid-a"), line(5, retries=retries))
        assert not warnings(w.reconcile(t))  # the same outage: no second event
    assert f"{retries} tries failed" in storage_condition(w.status)["message"]
    w.pod(pod("archive-0-a", "uid-a"), line(6))
    w.reconcile(1040)
    cond = storage_condition(w.status)
    assert (cond["status"], cond["reason"]) == ("True", "StorageAvailable")
    w.pod(pod("archive-0-a", "uid-a"), line(6, retries=1, store="input"))
    (event,) = warnings(w.reconcile(1050))  # a new outage warns again
    assert "the input storage" in event


def test_a_worker_waiting_out_an_outage_longer_than_stall_seconds_is_not_restarted_while_its_tries_go_on():
    w = World()  # spec.stallSeconds 60
    w.pod(pod("archive-0-a", "uid-a"), line(5))
    w.reconcile(1000)
    for t in range(1010, 1300, 10):
        w.pod(pod("archive-0-a", "uid-a"), line(5, retries=(t - 1000) // 10))
        w.reconcile(t)
    assert not deleted(w) and storage_condition(w.status)["status"] == "False"
    w.reconcile(1360)  # its tries stopped moving (a frozen process): stalled like any other
    assert deleted(w) == ["archive-0-a"]


def test_a_real_worker_whose_s3_input_refuses_connections_is_shown_waiting_for_its_input_with_the_endpoint():
    """The worker (`python -m ocr_batch_worker`, a real process) against an S3 endpoint where nothing
    listens, its log (stdout and stderr, as the kubelet keeps it) read by the controller."""
    dead = f"http://127.0.0.1:{free_port()}"
    doc = {"serviceUrl": f"http://127.0.0.1:{free_port()}", "input": {"s3": {"url": "s3://archive/private-2026/"}},
           "output": {"s3": {"url": "s3://archive/out/"}}, "progressIntervalSeconds": 0.5,
           "limits": {"storageRetrySeconds": 3}}
    env = {**os.environ, "BATCH_CONFIG": json.dumps(doc)}
    for role in ("INPUT", "OUTPUT"):
        env |= {f"{role}_AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY", f"{role}_AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
                f"{role}_AWS_ENDPOINT_URL": dead}
    proc = subprocess.run([sys.executable, "-m", "ocr_batch_worker"], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
    assert proc.returncode == EXIT_STORAGE, proc.stdout[-3000:]
    w = World()
    w.pod(pod("archive-0-a", "uid-a"), "\n".join(proc.stdout.splitlines()[-50:]) + "\n")
    (event,) = warnings(w.reconcile(1000))
    assert event.startswith("index 0: the input storage has not answered since ")
    assert f"last: no answer from {dead} (EndpointConnectionError))" in event
    assert "spec.limits.storageRetrySeconds (600 s)" in event  # the batch's own spec: its default
    for secret in ("private-2026", "AKIAEXAMPLEKEY", "s3cr3t-value"):
        assert secret not in event
