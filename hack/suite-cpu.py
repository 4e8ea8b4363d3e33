#!/usr/bin/env python3
"""The CPU seconds a command uses, all of its processes together, and who used them.

    sudo python3 hack/suite-cpu.py [--json out.json] [--interval 3] -- make test
    sudo python3 hack/suite-cpu.py -- .venv/bin/python -m pytest -n 0 tests/server/test_tls.py

Wall time is noise on a shared 2-core machine; CPU seconds are what the suite costs. The total is
exact: the command runs in a cgroup of its own (cgroup v1 `cpuacct`, or a v2 cgroup's
`cpu.stat`), which every descendant inherits, daemons and reaped children included, plus the real
node's pod cgroup (`/causalflow-realnode`) while the node's kubelet is one of the command's own
processes (runc moves a container's processes there). The split by program is sampled: every
`--interval` seconds each of those processes' utime+stime is read from /proc and kept at its
highest, and its command line names its kind (the server under test, vLLM's EngineCore, the
pytest workers, the API server, ...). What ran between two samples and exited (kubectl, helm,
short tools) is in the total but not in the split: it is shown as `short-lived`, unless process
accounting (hack/pacct.py, on by default as root) names it: then each exited process is counted
exactly, the unsampled ones as `exited: <command name> (under <kind of its sampled ancestor>)`,
and what is left (processes whose parent had already exited) is `unattributed`.

Needs root (it creates the cgroup); prints the table at the end, writes it as JSON with --json (with
the TOP largest processes and every real-node pod's processes, their command lines prefixed with
the pod's name: which test's pods cost what).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pacct

CGROUP_V1 = Path("/sys/fs/cgroup/cpuacct")
CGROUP_V2 = Path("/sys/fs/cgroup/unified")
NODE_CGROUP = "causalflow-realnode"
TICK = os.sysconf("SC_CLK_TCK")
TOP = 40  # processes listed with their command lines in the JSON
CMDLINE_KEPT = 300  # characters of each

# (kind, pattern on the command line), first match wins.
KINDS = (
    ("vLLM EngineCore", r"EngineCore|VLLM::"),
    ("server under test (vLLM)", r"\.venv-vllm/bin/python\S* -m ocr_server\b"),
    ("server under test", r"-m ocr_server(_testing\.stand_in)?\b|ocr_server/__main__|uvicorn|tests\.zygote ocr_server"),
    ("operator", r"-m ocr_operator\b|ocr_batch_worker|tests\.zygote ocr_operator"),
    ("kube-apiserver", r"/kube-apiserver\b"),
    ("etcd", r"/etcd\b"),
    ("kube-controller-manager", r"/kube-controller-manager\b"),
    ("kube-scheduler", r"/kube-scheduler\b"),
    ("kwok", r"/kwok\b"),
    ("kubelet", r"/kubelet\b"),
    ("kube-proxy", r"/kube-proxy\b"),
    ("containerd", r"containerd|runc\b"),
    ("prometheus", r"/prometheus(-adapter)?\b|/promtool\b"),
    ("image builds", r"buildah|imagebuild|imagestream|imagestore"),
    ("pip/uv", r"\bpip\b|/uv\b|\buv pip\b"),
    ("go builds", r"/go\b|/compile\b|/link\b|/asm\b|\bcgo\b"),
    ("pytest", r"pytest|execnet|sys\.stdin\.readline"),
    ("kubectl/helm", r"/kubectl\b|/helm\b"),
)


def kind_of(cmdline: str) -> str:
    for name, pattern in KINDS:
        if re.search(pattern, cmdline):
            return name
    return "other"


class Cgroup:
    """A cgroup of our own that reports its CPU seconds, in whichever hierarchy the machine has."""

    def __init__(self, name: str) -> None:
        if (CGROUP_V1 / "cpuacct.usage").exists():
            self.path, self.v1 = CGROUP_V1 / name, True
        elif (CGROUP_V2 / "cgroup.procs").exists() or Path("/sys/fs/cgroup/cgroup.controllers").exists():
            root = CGROUP_V2 if (CGROUP_V2 / "cgroup.procs").exists() else Path("/sys/fs/cgroup")
            self.path, self.v1 = root / name, False
        else:
            sys.exit("no cpuacct (v1) or unified (v2) cgroup hierarchy mounted")
        self.path.mkdir()
        self.rel = "/" + name

    def join(self) -> None:
        """Put the calling process in it (run in the child before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        return cpu_seconds(self.path, self.v1)

    def remove(self) -> None:
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def cpu_seconds(path: Path, v1: bool) -> float:
    if v1:
        return int((path / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def cgroup_of(pid: str, v1: bool) -> str | None:
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (v1 and "cpuacct" in controllers.split(",")) or (not v1 and controllers == ""):
                return path
    except OSError:
        return None
    return None


def pod_name(pid: str) -> str:
    """The pod a real-node container process runs in: the container's HOSTNAME is its pod's name."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return next((e[9:].decode(errors="replace") for e in environ if e.startswith(b"HOSTNAME=")), "?")


def sample(ours: str, node: bool, v1: bool, seen: dict[tuple[int, int], tuple[str, float, str]]) -> bool:
    """Read every process in our cgroup (and the node's pod cgroup when `node`); keep each one's
    kind, highest CPU seconds and command line in `seen` (a real-node process's command line is
    prefixed with its pod's name, `[pod] `). Returns whether the real node's kubelet is one of ours."""
    kubelet_ours = False
    for pid in filter(str.isdigit, os.listdir("/proc")):
        group = cgroup_of(pid, v1)
        if group is None:
            continue
        in_node = node and group.startswith("/" + NODE_CGROUP)
        if not (group == ours or group.startswith(ours + "/") or in_node):
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        seconds = (int(stat[11]) + int(stat[12])) / TICK
        kind = kind_of(cmdline)
        if in_node:  # what runs in the real node's containers: the product's pods
            kind = "real-node pods: " + ("server" if kind == "server under test" else kind)
            cmdline = f"[{pod_name(pid)}] {cmdline}"
        kubelet_ours |= kind == "kubelet"
        key = int(pid), int(stat[19])  # pid and start time: a reused pid is another process
        previous = seen.get(key)
        seen[key] = (kind, max(seconds, previous[1] if previous else 0.0), cmdline[:CMDLINE_KEPT])
    return kubelet_ours


def boot_epoch() -> float:
    return float(next(line.split()[1] for line in Path("/proc/stat").read_text().splitlines()
                      if line.startswith("btime ")))


def split(seen: dict[tuple[int, int], tuple[str, float, str]], acct_file: Path | None
          ) -> tuple[dict[str, float], dict[str, int], list[dict[str, object]]]:
    """CPU seconds and process count by kind: the sampled highs, made exact and completed with the
    unsampled exits when accounting ran; and the TOP sampled processes by CPU, with their command
    lines (what a kind such as `other` is made of)."""
    boot = boot_epoch()
    processes = [pacct.Seen(pid, boot + start / TICK, kind, seconds) for (pid, start), (kind, seconds, _) in seen.items()]
    cmdlines = [cmdline for _, _, cmdline in seen.values()]
    extra_seconds: dict[str, float] = {}
    extra_count: dict[str, int] = {}
    if acct_file is not None:
        exact, extra_seconds, extra_count = pacct.attribute(pacct.read(acct_file), processes)
        acct_file.unlink()
        processes = [pacct.Seen(p.pid, p.start, p.kind, max(p.cpu, exact.get(i, 0.0))) for i, p in enumerate(processes)]
    by_kind: dict[str, float] = {}
    count: dict[str, int] = {}
    for process in processes:
        by_kind[process.kind] = by_kind.get(process.kind, 0.0) + process.cpu
        count[process.kind] = count.get(process.kind, 0) + 1
    for name, seconds in extra_seconds.items():
        by_kind[name], count[name] = seconds, extra_count[name]
    largest = sorted(range(len(processes)), key=lambda i: -processes[i].cpu)
    top = [{"kind": processes[i].kind, "cpu_seconds": round(processes[i].cpu, 1), "cmdline": cmdlines[i]}
           for rank, i in enumerate(largest) if rank < TOP or processes[i].kind.startswith("real-node pods:")]
    return by_kind, count, top


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=3.0, help="seconds between /proc samples")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument("--no-acct", dest="acct", action="store_false",
                        help="do not turn process accounting on (the pid namespace's, for the command's run)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")

    group = Cgroup(f"suite-cpu-{os.getpid()}")
    node_path = (CGROUP_V1 if group.v1 else group.path.parent) / NODE_CGROUP
    seen: dict[tuple[int, int], tuple[str, float, str]] = {}
    node_seconds, node_last = 0.0, None
    acct_file = Path(f"/tmp/suite-cpu-{os.getpid()}.acct") if args.acct and pacct.available() else None
    if acct_file is not None:
        pacct.switch(acct_file)

    def interrupted(signum, frame):
        raise KeyboardInterrupt  # SIGTERM as ^C: the command is stopped, accounting off, the cgroup removed

    signal.signal(signal.SIGTERM, interrupted)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(command, preexec_fn=group.join)
        while True:
            try:
                returncode = proc.wait(args.interval)
            except subprocess.TimeoutExpired:
                returncode = None
            kubelet_ours = sample(group.rel, node_last is not None, group.v1, seen)
            try:
                now = cpu_seconds(node_path, group.v1) if kubelet_ours or node_last is not None else None
            except OSError:  # the node stopped and removed its cgroup
                now = None
            if now is not None and node_last is not None and now >= node_last:
                node_seconds += now - node_last
            node_last = now if (kubelet_ours and now is not None) else None
            if returncode is not None:
                break
        total = group.seconds() + node_seconds
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        returncode = 130
        total = group.seconds() + node_seconds
    finally:
        group.remove()
        if acct_file is not None:
            pacct.switch(None)
    wall = time.monotonic() - t0

    by_kind, count, top = split(seen, acct_file)
    over = sum(by_kind.values()) - total
    if over > 5:  # the total is the cgroup's own count: a split above it counted some process twice
        print(f"suite-cpu: the split below counts {over:.0f} CPU s more than the total", file=sys.stderr)
    by_kind["unattributed" if acct_file else "short-lived"] = max(0.0, -over)
    figures = {"command": command, "returncode": returncode, "wall_seconds": round(wall, 1),
               "cpu_seconds": round(total, 1), "real_node_pod_seconds": round(node_seconds, 1),
               "by_kind": {k: round(v, 1) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
               "processes": count, "top": top}
    print(f"\nsuite-cpu: {total:.0f} CPU s in {wall:.0f} s wall (exit {returncode}): {' '.join(command)}",
          file=sys.stderr)
    for kind, seconds in figures["by_kind"].items():
        if seconds < 0.5:
            continue  # in the JSON
        print(f"  {kind:50s} {seconds:8.1f} s  {100 * seconds / total if total else 0:5.1f} %"
              f"  {count.get(kind, '')} {'processes' if kind in count else ''}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return returncode


if __name__ == "__main__":
    sys.exit(main())
