"""BSD process accounting (acct(2)): the exact CPU seconds of every process that exits.

hack/suite-cpu.py samples /proc every few seconds, so a process that starts and exits between two
samples (kubectl, helm, a python helper, a pod's short container) is seen by nobody, and one that is
seen loses what it used after its last sample. With accounting on, the kernel writes one record per
exiting process (its pid, parent pid, start time, command name and CPU time, threads included), so
each such process is counted exactly and named by the sampled process it descends from.

Accounting is the pid namespace's, not the command's: records of processes that descend from none
of the command's are left out here.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from pathlib import Path

RECORD = 64  # struct acct_v3
AHZ = 100  # its time unit: USER_HZ


@dataclass(frozen=True)
class Exit:
    pid: int
    ppid: int
    comm: str
    start: float  # epoch seconds (whole seconds: the record's resolution)
    cpu: float  # user + system seconds of all its threads


@dataclass(frozen=True)
class Seen:
    """A process the sampler saw: its kind and highest CPU seconds so far."""

    pid: int
    start: float  # epoch seconds
    kind: str
    cpu: float


def switch(path: Path | None) -> None:
    """Turn accounting on into `path` (created if missing), or off with None. Needs CAP_SYS_PACCT."""
    if path is not None:
        path.touch()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(None if path is None else os.fsencode(path)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"acct({path}): {os.strerror(errno)}")


def available() -> bool:
    return os.geteuid() == 0 and Path("/proc/sys/kernel/acct").exists()


def _comp(value: int) -> int:
    """comp_t: a 13-bit mantissa and a base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def read(path: Path) -> list[Exit]:
    data = path.read_bytes()
    exits = []
    for offset in range(0, len(data) - RECORD + 1, RECORD):
        record = data[offset:offset + RECORD]
        _, version, _, _, _, _, pid, ppid, btime, _ = struct.unpack("<BBHIIIIIIf", record[:32])
        if version & 0x7F != 3:
            continue
        utime, stime = struct.unpack("<HH", record[32:36])
        comm = record[48:64].split(b"\0", 1)[0].decode(errors="replace")
        exits.append(Exit(pid, ppid, comm, float(btime), (_comp(utime) + _comp(stime)) / AHZ))
    return exits


def _same(a_start: float, b_start: float) -> bool:
    """The record's start is the exit's wall-clock second less its whole seconds of run time (up to
    a second late) and the sampled one comes from the boot time in whole seconds (up to a second
    early): measured, +1.15 s for a short process. With 1.5 s allowed, runs of make test counted a
    few long-lived processes twice (their split exceeded the exact total by 60-247 s); a clock
    slewed over minutes is the likely cause."""
    return abs(a_start - b_start) <= 3.0


def attribute(exits: list[Exit], seen: list[Seen]) -> tuple[dict[int, float], dict[str, float], dict[str, int]]:
    """Exact seconds for sampled processes that exited (by index in `seen`), and the CPU seconds and
    count of the unsampled exits of the command's tree, by "exited: <comm> (under <kind>)", where
    kind is that of the nearest sampled ancestor. Pids are reused: a parent is the process with that
    pid that started last before its child."""
    by_pid: dict[int, list[tuple[float, int | None, Exit | None]]] = {}
    for index, process in enumerate(seen):
        by_pid.setdefault(process.pid, []).append((process.start, index, None))
    exact: dict[int, float] = {}
    unsampled: list[Exit] = []
    for exit_ in exits:
        match = next((i for start, i, _ in by_pid.get(exit_.pid, ()) if i is not None and _same(start, exit_.start)), None)
        if match is not None:
            exact[match] = exit_.cpu
        else:
            unsampled.append(exit_)
            by_pid.setdefault(exit_.pid, []).append((exit_.start, None, exit_))

    def parent(child: Exit) -> tuple[int | None, Exit | None]:
        candidates = [c for c in by_pid.get(child.ppid, ()) if c[0] <= child.start + 1.5]
        if not candidates:
            return None, None
        _, index, record = max(candidates, key=lambda c: c[0])
        return index, record

    seconds: dict[str, float] = {}
    count: dict[str, int] = {}
    for exit_ in unsampled:
        node, kind = exit_, None
        for _ in range(64):  # a chain of unsampled exits up to a sampled ancestor
            index, record = parent(node)
            if index is not None:
                kind = seen[index].kind
                break
            if record is None or record is node:
                break
            node = record
        if kind is None:
            continue  # not the command's
        name = f"exited: {exit_.comm} (under {kind})"
        seconds[name] = seconds.get(name, 0.0) + exit_.cpu
        count[name] = count.get(name, 0) + 1
    return exact, seconds, count
