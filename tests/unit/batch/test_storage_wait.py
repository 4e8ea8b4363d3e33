"""The workers' storage waits as the OcrBatch shows them (ocr_operator.ocrbatch.storagewait, pure),
and the stall rule's view of them (stall.progress_mark): a worker waiting out an outage within
its budget moves its stall clock with each failed try."""

from __future__ import annotations

import json

from ocr_operator.ocrbatch import decide, stall, storagewait

SINCE = 1_796_374_800.0  # 2026-12-04T09:00:00Z
BUDGET = 600


def report(index: int = 0, storage: dict | None = None, **counts) -> dict:
    return {"index": index, "shards": 2, "pages_done": 0, "finished": False, "storage": storage, **counts}


def waiting(store: str = "input", since: float = SINCE, retries: int = 3,
            error: str = "no answer from https://s3.example.com (ConnectTimeoutError)") -> dict:
    return {"store": store, "waiting_since": since, "retries": retries, "last_error": error}


def test_a_waiting_worker_makes_the_condition_false_naming_its_store_error_since_tries_and_the_budget():
    said = storagewait.verdict({0: report(storage=waiting())}, None, BUDGET)
    assert (said.status, said.reason) == ("False", "StorageUnavailable")
    assert said.message == ("index 0: the input storage has not answered since 2026-12-04T09:00:00Z (3 tries failed; "
                            "last: no answer from https://s3.example.com (ConnectTimeoutError)). Each worker waits up "
                            "to spec.limits.storageRetrySeconds (600 s), then its pod fails and the Job runs the "
                            "index again")
    assert said.event == said.message  # the Warning event: the condition turned False


def test_the_warning_event_is_once_per_outage_however_long_it_lasts():
    before = {"type": "StorageAvailable", "status": "False", "reason": "StorageUnavailable", "message": "m"}
    said = storagewait.verdict({0: report(storage=waiting(retries=40, store="output"))}, before, BUDGET)
    assert said.status == "False" and said.event is None and "the output storage" in said.message
    assert "40 tries failed" in said.message


def test_the_condition_turns_true_once_no_worker_waits_and_a_new_outage_warns_again():
    before = {"type": "StorageAvailable", "status": "False", "reason": "StorageUnavailable", "message": "m"}
    ended = storagewait.verdict({0: report(pages_done=3)}, before, BUDGET)
    assert (ended.status, ended.reason, ended.event) == ("True", "StorageAvailable", None)
    again = storagewait.verdict({0: report(storage=waiting())}, {**before, "status": "True"}, BUDGET)
    assert again.status == "False" and again.event is not None


def test_a_batch_that_never_waited_has_no_storage_condition():
    assert storagewait.verdict({0: report(pages_done=3), 1: report(1)}, None, BUDGET) is None


def test_nothing_read_yet_is_no_news_so_an_operator_restart_does_not_end_an_outage():
    before = {"type": "StorageAvailable", "status": "False", "reason": "StorageUnavailable", "message": "m"}
    assert storagewait.verdict({}, before, BUDGET) is None


def test_the_longest_wait_is_named_and_the_other_waiting_indices_counted():
    reports = {0: report(0, waiting(since=SINCE + 30)), 1: report(1, waiting("output", since=SINCE)),
               2: report(2, waiting(since=SINCE + 5)), 3: report(3)}
    said = storagewait.verdict(reports, None, BUDGET)
    assert said.message.startswith("index 1: the output storage") and "; 2 more index(es) waiting too." in said.message


def test_a_finished_index_or_a_malformed_storage_field_is_not_a_wait():
    reports = {0: report(0, waiting(), finished=True), 1: report(1, {"waiting_since": "soon", "retries": 1}),
               2: report(2, "down"), 3: report(3, {"waiting_since": True, "retries": 1})}
    assert storagewait.waits(reports) == []
    odd = storagewait.waits({0: report(0, {"store": "etcd", "waiting_since": SINCE, "retries": 1,
                                           "last_error": "x" * 5000})})
    assert odd[0].store == "" and len(odd[0].last_error) == storagewait.MAX_ERROR_CHARS


def log(report: dict) -> str:
    return "2026-12-04 09:00:01 WARNING listing failed (...); again in 10.0 s\n" + '{"progress": ' + \
        json.dumps(report) + "}\n"


def mark(report: dict) -> str:
    text = log(report)
    return stall.progress_mark(decide.report_from_log(text), text)


def test_a_worker_waiting_out_an_outage_within_its_budget_is_not_stalled_while_its_tries_go_on():
    w = stall.observe(None, "uid-a", "p", mark(report()), now=0)
    for t in range(10, 600, 10):
        w = stall.observe(w, "uid-a", "p", mark(report(storage=waiting(retries=t // 10))), now=t)
        assert not stall.stalled(w, t, 60)


def test_a_waiting_worker_whose_tries_stop_moving_stalls_like_any_other():
    """A process frozen during an outage: its last line, with the same tries, is read again and again."""
    w = stall.observe(None, "uid-a", "p", mark(report(storage=waiting(retries=7))), now=0)
    for t in (10, 20, 30, 40, 50, 60):
        w = stall.observe(w, "uid-a", "p", mark(report(storage=waiting(retries=7))), now=t)
    assert stall.stalled(w, 60, 60)
