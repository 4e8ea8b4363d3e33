"""The OcrBatch controller shows its workers' storage waits (controller._storage over storagewait.py,
against an in-memory API): a worker whose progress line carries a storage wait makes the batch's
StorageAvailable condition False with one Warning event per outage, True again once it ends, and
is not restarted for a stall while its tries go on."""

from __future__ import annotations

import json

from tests.unit.batch.test_controller_stall import World, deleted, pod

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
