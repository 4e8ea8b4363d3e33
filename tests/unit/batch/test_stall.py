"""The stall rule (ocr_operator.ocrbatch.stall): an index whose running pod's progress has not
moved for spec.stallSeconds is stalled, read from the progress lines of the worker's log."""

from __future__ import annotations

import json

from ocr_operator.ocrbatch import decide, stall

STALL = 60.0


def log(**counts) -> str:
    """A worker's log tail ending in one progress line (as worker._stdout writes it)."""
    report = {"index": 0, "shards": 1, "pages_done": 0, "updated_at": 0.0, **counts}
    return "2026-12-04 09:00:00 INFO index 0 of 1\n" + '{"progress": ' + json.dumps(report) + "}\n"


def mark(text: str) -> str:
    return stall.progress_mark(decide.report_from_log(text), text)


def test_an_index_whose_progress_moves_is_not_stalled():
    w = stall.observe(None, "uid-a", "batch-0-a", mark(log(pages_done=1)), now=0)
    for t in range(10, 200, 10):
        w = stall.observe(w, "uid-a", "batch-0-a", mark(log(pages_done=t)), now=t)
        assert not stall.stalled(w, t, STALL)


def test_an_index_whose_progress_has_not_moved_for_stall_seconds_is_stalled():
    w = stall.observe(None, "uid-a", "batch-0-a", mark(log(pages_done=3)), now=0)
    w = stall.observe(w, "uid-a", "batch-0-a", mark(log(pages_done=3)), now=30)
    assert not stall.stalled(w, 59, STALL)
    assert stall.stalled(w, 60, STALL)


def test_a_new_report_with_only_its_clock_changed_is_not_progress():
    """A live event loop whose lanes are all hung (a dead NFS volume) still finishes nothing."""
    w = stall.observe(None, "uid-a", "p", mark(log(pages_done=3, updated_at=1.0)), now=0)
    w = stall.observe(w, "uid-a", "p", mark(log(pages_done=3, updated_at=50.0, pages_per_second=0.1)), now=50)
    assert stall.stalled(w, 60, STALL)


def test_a_new_pod_of_the_index_restarts_the_clock():
    w = stall.observe(None, "uid-a", "batch-0-a", mark(log(pages_done=3)), now=0)
    w = stall.observe(w, "uid-b", "batch-0-b", mark(log(pages_done=3)), now=55)
    assert (w.pod, w.since, w.moved) == ("uid-b", 55, False)
    assert not stall.stalled(w, 100, STALL)
    assert stall.stalled(w, 115, STALL)


def test_a_log_that_cannot_be_read_is_no_news_so_a_lost_nodes_pod_stalls():
    w = stall.observe(None, "uid-a", "p", mark(log(pages_done=3)), now=0)
    for t in (10, 20, 30, 40, 50, 60):
        w = stall.observe(w, "uid-a", "p", None, now=t)  # the kubelet does not answer
    assert stall.stalled(w, 60, STALL)


def test_a_pod_never_read_is_watched_from_when_it_was_first_seen_running():
    w = stall.observe(None, "uid-a", "p", None, now=5)
    assert not stall.stalled(w, 64, STALL) and stall.stalled(w, 65, STALL)
    w = stall.observe(w, "uid-a", "p", mark(log()), now=30)  # its first report is news
    assert not stall.stalled(w, 65, STALL)


def test_a_pod_not_running_is_not_stalled():
    assert not stall.stalled(None, 10_000, STALL)


def test_a_tail_without_a_progress_line_is_a_live_worker_while_it_changes():
    """More lines logged since the last report than the read takes: the tail is the mark."""
    first = "\n".join(f"INFO doc-{i}.bin: unsupported" for i in range(50))
    later = "\n".join(f"INFO doc-{i}.bin: unsupported" for i in range(50, 100))
    w = stall.observe(None, "uid-a", "p", mark(first), now=0)
    w = stall.observe(w, "uid-a", "p", mark(later), now=50)
    assert not stall.stalled(w, 100, STALL)
    w = stall.observe(w, "uid-a", "p", mark(later), now=100)
    assert stall.stalled(w, 110, STALL)


def test_a_restarted_index_has_recovered_once_its_new_pod_moved_or_it_finished():
    restarted = {0: stall.Restart("uid-a", 0), 1: stall.Restart("uid-c", 0)}
    new = stall.observe(None, "uid-b", "batch-0-b", mark(log(pages_done=1)), now=0)
    watches = {0: new, 1: stall.Watch("uid-c", "batch-1-c", None, 0)}
    assert not stall.recovered(restarted, watches, finished={1})  # the new pod has not moved yet
    watches[0] = stall.observe(new, "uid-b", "batch-0-b", mark(log(pages_done=2)), now=10)
    assert stall.recovered(restarted, watches, finished={1})
    assert not stall.recovered(restarted, watches, finished=set())  # index 1 still on the stalled pod


def test_a_pod_deleted_for_a_stall_and_still_there_stall_seconds_later_is_lost():
    """Its node does not confirm the deletion: the Job would wait for it for ever."""
    gone = stall.Restart("uid-a", at=100)
    assert not stall.lost(gone, "uid-a", 159, STALL)
    assert stall.lost(gone, "uid-a", 160, STALL)
    assert not stall.lost(gone, "uid-b", 1000, STALL) and not stall.lost(None, "uid-a", 1000, STALL)
