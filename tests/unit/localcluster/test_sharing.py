"""How processes share one cluster (localcluster/sharing.py): who starts it, who stops it and when,
and how exclusive work waits its turn. Each ClusterShare opens its own lock files, so two of them in
one process contend as two processes would (flock locks belong to the open file)."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

from localcluster.component import Component
from localcluster.sharing import ClusterShare, refresh


def opened(root, calls: list[str], name: str) -> ClusterShare:
    share = ClusterShare(root)
    share.open(lambda workdir: calls.append(f"{name} started {workdir.name}"),
               lambda workdir: calls.append(f"{name} attached {workdir.name}"))
    return share


def waits(fn, seconds: float = 0.3) -> threading.Thread:
    """`fn` in a thread, given `seconds` to finish; the thread (still running if it blocked)."""
    thread = threading.Thread(target=fn, daemon=True)
    thread.start()
    thread.join(seconds)
    return thread


def test_the_first_process_starts_the_cluster_and_the_next_attaches(tmp_path):
    calls: list[str] = []
    first, second = opened(tmp_path, calls, "a"), opened(tmp_path, calls, "b")
    assert calls == ["a started cluster", "b attached cluster"]
    assert first.owner and not second.owner


def test_the_owner_stops_the_cluster_only_after_every_other_process_has_left(tmp_path):
    calls: list[str] = []
    owner, other = opened(tmp_path, calls, "a"), opened(tmp_path, calls, "b")
    closing = waits(lambda: owner.close(stop=lambda: calls.append("stopped")))
    assert closing.is_alive() and "stopped" not in calls
    other.close(stop=lambda: calls.append("stopped by the other"))
    closing.join(5)
    assert not closing.is_alive() and calls[-1] == "stopped"


def test_a_process_that_comes_after_the_stop_starts_a_cluster_of_its_own(tmp_path):
    calls: list[str] = []
    opened(tmp_path, calls, "a").close(stop=lambda: calls.append("stopped"))
    late = opened(tmp_path, calls, "b")
    assert calls == ["a started cluster", "stopped", "b started cluster"] and late.owner


def test_an_exclusive_turn_waits_for_the_shared_ones_and_later_shared_turns_queue_behind_it(tmp_path):
    calls: list[str] = []
    shares = [opened(tmp_path, calls, name) for name in "abc"]
    order: list[str] = []
    release = threading.Event()

    def shared_then_wait() -> None:
        with shares[0].turn(exclusive=False):
            order.append("a shared")
            release.wait(5)

    def exclusive() -> None:
        with shares[1].turn(exclusive=True):
            order.append("b exclusive")

    def late_shared() -> None:
        with shares[2].turn(exclusive=False):
            order.append("c shared")

    holder = waits(shared_then_wait, 0.1)
    blocked = waits(exclusive)
    assert blocked.is_alive(), "the exclusive turn did not wait for the shared one"
    queued = waits(late_shared)
    assert queued.is_alive(), "a shared turn overtook the exclusive one that was waiting"
    release.set()
    for thread in (holder, blocked, queued):
        thread.join(5)
    assert order == ["a shared", "b exclusive", "c shared"]


def test_a_shared_turn_taken_alone_waits_for_the_other_shared_turn_and_later_ones_queue_behind_it(tmp_path):
    calls: list[str] = []
    shares = [opened(tmp_path, calls, name) for name in "abc"]
    order: list[str] = []
    release, holding, inside = threading.Event(), threading.Event(), threading.Event()

    def other_module() -> None:
        with shares[0].turn():
            order.append("a shared")
            holding.set()
            release.wait(5)

    def module_with_an_exclusive_test() -> None:
        with shares[1].turn() as turn:
            order.append("b shared")
            inside.set()
            turn.take_alone()
            order.append("b alone")
            assert turn.exclusive

    def next_module() -> None:
        with shares[2].turn():
            order.append("c shared")

    holder = waits(other_module, 0)
    assert holding.wait(5)
    upgrading = waits(module_with_an_exclusive_test, 0)
    assert inside.wait(5), "the second module's shared turn did not start beside the first"
    upgrading.join(0.3)
    assert upgrading.is_alive(), "taking the turn alone did not wait for the other shared turn"
    queued = waits(next_module)
    assert queued.is_alive(), "a shared turn overtook the one waiting to be alone"
    release.set()
    for thread in (holder, upgrading, queued):
        thread.join(5)
    assert order == ["a shared", "b shared", "b alone", "c shared"]


def test_two_shared_turns_that_both_ask_to_be_alone_take_it_one_after_the_other(tmp_path):
    calls: list[str] = []
    a, b = opened(tmp_path, calls, "a"), opened(tmp_path, calls, "b")
    both_shared = threading.Barrier(2, timeout=5)
    alone: list[str] = []

    def module(share, name: str) -> None:
        with share.turn() as turn:
            both_shared.wait()
            turn.take_alone()
            alone.append(name)

    threads = [waits(lambda s=s, n=n: module(s, n), 0) for s, n in ((a, "a"), (b, "b"))]
    for thread in threads:
        thread.join(5)
    assert not any(t.is_alive() for t in threads) and sorted(alone) == ["a", "b"]


def test_two_shared_turns_run_at_once(tmp_path):
    calls: list[str] = []
    a, b = opened(tmp_path, calls, "a"), opened(tmp_path, calls, "b")
    inside: list[str] = []

    def second() -> None:
        with b.turn(exclusive=False):
            inside.append("b")

    with a.turn(exclusive=False):
        assert not waits(second).is_alive() and inside == ["b"]


def test_refresh_takes_the_pids_another_process_recorded_and_keeps_the_handles_of_unchanged_ones(tmp_path):
    kept = Component("etcd", ["etcd"], tmp_path / "etcd.log", pid=101)
    cluster = SimpleNamespace(workdir=tmp_path, real_node=None,
                              components={"etcd": kept, "containerd": Component("containerd", ["c"], tmp_path / "c.log", pid=202),
                                          "gone": Component("gone", ["g"], tmp_path / "g.log", pid=303)})
    (tmp_path / "state.json").write_text(json.dumps({"pids": {"etcd": 101, "containerd": 909},
                                                     "argv": {"etcd": ["etcd"], "containerd": ["containerd", "--config", "x"]}}))
    refresh(cluster)
    assert set(cluster.components) == {"etcd", "containerd"}
    assert cluster.components["etcd"] is kept
    restarted = cluster.components["containerd"]
    assert (restarted.pid, restarted.argv, restarted.log) == (909, ["containerd", "--config", "x"], tmp_path / "logs" / "containerd.log")


def test_closing_a_share_that_was_never_opened_does_nothing(tmp_path):
    calls: list[str] = []
    started = time.monotonic()
    ClusterShare(tmp_path).close(stop=lambda: calls.append("stopped"))
    assert calls == [] and time.monotonic() - started < 1
