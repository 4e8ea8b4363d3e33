"""hack/pacct.py: reading acct(2) records and naming each exited process by its sampled ancestor.

The records are written here in the kernel's acct_v3 layout; accounting itself is never switched on
by a test (it is the pid namespace's, and a measuring hack/suite-cpu.py run may hold it).
"""

from __future__ import annotations

import struct
from pathlib import Path

from hack import pacct
from tests.hack_scripts import HACK, load


def record(pid: int, ppid: int, comm: str, start: int, ticks: int, version: int = 3) -> bytes:
    """One struct acct_v3; `ticks` of user time as comp_t (exponent 0 below 8192)."""
    head = struct.pack("<BBHIIIIIIf", 0, version, 0, 0, 0, 0, pid, ppid, start, 0.0)
    times = struct.pack("<HHHHHHHH", ticks, 0, 0, 0, 0, 0, 0, 0)
    return head + times + comm.encode().ljust(16, b"\0")


def test_records_are_read_with_their_cpu_seconds_and_command_name(tmp_path: Path):
    big = (1 << 13) | 1000  # comp_t: mantissa 1000, exponent 1 -> 8000 ticks
    path = tmp_path / "acct"
    path.write_bytes(record(10, 1, "kubectl", 100, 42) + struct.pack("<BBHIIIIIIf", 0, 3, 0, 0, 0, 0, 11, 1, 100, 0.0)
                     + struct.pack("<HHHHHHHH", big, 0, 0, 0, 0, 0, 0, 0) + b"python3".ljust(16, b"\0"))
    exits = pacct.read(path)
    assert [(e.pid, e.ppid, e.comm, e.start, e.cpu) for e in exits] == [
        (10, 1, "kubectl", 100.0, 0.42), (11, 1, "python3", 100.0, 80.0)]


def test_records_of_another_version_are_skipped(tmp_path: Path):
    path = tmp_path / "acct"
    path.write_bytes(record(10, 1, "old", 100, 5, version=2) + record(11, 1, "new", 100, 5))
    assert [e.comm for e in pacct.read(path)] == ["new"]


def test_an_unsampled_exit_is_named_by_its_nearest_sampled_ancestor():
    seen = [pacct.Seen(pid=100, start=1000.0, kind="pytest", cpu=50.0)]
    exits = [pacct.Exit(pid=200, ppid=100, comm="bash", start=1010.0, cpu=0.1),
             pacct.Exit(pid=201, ppid=200, comm="kubectl", start=1011.0, cpu=0.3),
             pacct.Exit(pid=202, ppid=200, comm="kubectl", start=1012.0, cpu=0.2)]
    exact, seconds, count = pacct.attribute(exits, seen)
    assert exact == {}
    assert seconds == {"exited: bash (under pytest)": 0.1, "exited: kubectl (under pytest)": 0.5}
    assert count == {"exited: bash (under pytest)": 1, "exited: kubectl (under pytest)": 2}


def test_a_sampled_process_that_exits_gets_its_exact_seconds():
    seen = [pacct.Seen(pid=100, start=1000.4, kind="server under test", cpu=9.0)]
    exact, seconds, _ = pacct.attribute([pacct.Exit(100, 1, "python", 1000.0, 11.5)], seen)
    assert exact == {0: 11.5} and seconds == {}


def test_a_long_lived_process_is_matched_despite_its_records_coarse_start():
    """The record's start can be two seconds after the sampled one (whole seconds on both sides and a
    slewed clock): still the same process, counted once with its exact seconds."""
    seen = [pacct.Seen(pid=100, start=1000.85, kind="server under test", cpu=150.0)]
    exact, seconds, _ = pacct.attribute([pacct.Exit(100, 1, "libuv-worker", 1003.0, 153.9)], seen)
    assert exact == {0: 153.9} and seconds == {}


def test_a_reused_pid_is_another_process():
    # pid 100 was first a sampled server, later an unsampled helper under pytest (pid 50)
    seen = [pacct.Seen(pid=100, start=1000.0, kind="server under test", cpu=9.0),
            pacct.Seen(pid=50, start=900.0, kind="pytest", cpu=30.0)]
    exits = [pacct.Exit(100, 50, "python3", 2000.0, 1.0), pacct.Exit(101, 100, "sh", 2001.0, 0.5)]
    exact, seconds, _ = pacct.attribute(exits, seen)
    assert exact == {}
    # sh's parent is the later pid 100 (the helper), whose ancestor is pytest, not the server
    assert seconds == {"exited: python3 (under pytest)": 1.0, "exited: sh (under pytest)": 0.5}


def test_exits_outside_the_commands_tree_are_left_out():
    seen = [pacct.Seen(pid=100, start=1000.0, kind="pytest", cpu=1.0)]
    exact, seconds, count = pacct.attribute([pacct.Exit(300, 1, "cron", 1005.0, 2.0)], seen)
    assert (exact, seconds, count) == ({}, {}, {})


def test_suite_cpu_splits_by_kind_and_lists_the_largest_processes_with_their_command_lines(monkeypatch):
    monkeypatch.syspath_prepend(str(HACK))  # it imports pacct as its neighbour, as `python3 hack/suite-cpu.py` runs
    suite_cpu = load("suite-cpu.py")
    seen = {(10, 100): ("pytest", 30.0, "python -m pytest -n 3 tests"),
            (11, 120): ("other", 50.0, "python hack/something.py"),
            (12, 130): ("pytest", 5.0, "python -c import sys; exec(sys.stdin.readline())")}
    by_kind, count, top = suite_cpu.split(seen, None)
    assert by_kind == {"pytest": 35.0, "other": 50.0} and count == {"pytest": 2, "other": 1}
    assert [(p["kind"], p["cpu_seconds"], p["cmdline"]) for p in top] == [
        ("other", 50.0, "python hack/something.py"), ("pytest", 30.0, "python -m pytest -n 3 tests"),
        ("pytest", 5.0, "python -c import sys; exec(sys.stdin.readline())")]
