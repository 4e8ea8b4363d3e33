"""What a real kubelet node changes on this machine: observe it, and undo it.

A kubelet, containerd, runc, the CNI plugins and kube-proxy change machine-wide state that
outlives their processes: mounts, network namespaces, links, routes, iptables/nftables rules,
cgroups, sysctls and a few hard-coded paths. `snapshot()` records all of that (the footprint
categories below), `leftovers(before, after)` is the pure diff a test asserts to be empty, and
the `undo_*` functions are the stop path's cleanup steps. Each undo step is idempotent, so
`make cluster-down` can run them again after a crashed or killed harness.

The snapshot covers the node's footprint, not everything else that happens on the machine at the
same time (buildah and mmdebstrap building images, the machine's own per-command cgroups): mounts
at or under the node's own dirs, the hard-coded paths and /run, plus network namespaces anywhere;
cgroups named kubepods* or under the node's cgroup root; processes by the node's executable names.
Links, addresses, routes, iptables/nftables and sysctls are compared whole.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
# Paths kubelet, containerd and the CNI plugins use whatever their flags say (hard-coded).
FIXED_PATHS = ("/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd",
               "/run/nri", "/var/run/netns", "/run/netns", "/var/lib/cni", "/etc/cni", "/opt/cni",
               "/usr/libexec/kubernetes", "/etc/kubernetes", "/var/lib/containerd", "/run/runc",
               "/var/run/cdi", "/etc/cdi")
# Process names of the node and of what runs in its containers.
NODE_PROCESSES = ("containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", "runc",
                  "pause", "causalflow-nodetest")
OTHER_TOOLS_MOUNTS = ("/run/containers/",)  # buildah/podman's run root
NODE_MOUNT_ROOTS = FIXED_PATHS + ("/run", "/var/run")
NODE_CGROUP_MARKERS = ("kubepods", "causalflow-realnode")
SYSCTL_TREES = ("vm", "kernel", "net/ipv4", "net/ipv6", "net/bridge", "net/netfilter", "net/core")
# Sysctls that change by themselves (counters, random values, per-interface entries).
VOLATILE_SYSCTL = re.compile(
    r"^kernel/(random/|ns_last_pid|pty/nr|tainted|sched_domain|usermodehelper)"
    r"|^net/ipv[46]/(conf|neigh)/(?!all/|default/)"
    r"|^net/netfilter/nf_conntrack_(count|buckets)$|^net/ipv6/route/|^net/ipv4/route/"
    r"|^vm/(stat_refresh|drop_caches|compact_memory)$|^net/core/(bpf_jit_harden|bpf_jit_kallsyms)$"
    r"|^kernel/(perf_event_max_sample_rate|hung_task_detect_count)$"
)
IPTABLES = ("iptables", "ip6tables")
IPTABLES_TABLES = ("filter", "nat", "mangle", "raw")
OWNED_CHAIN_PREFIXES = ("KUBE-", "CNI-", "CAUSALFLOW-")


def _run(*argv: str, timeout: float = 30, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


# -- observation ---------------------------------------------------------------------------------
def mounts() -> list[tuple[str, str]]:
    """(mount point, fs type) from /proc/self/mountinfo (octal escapes decoded), in mount order."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        point = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        out.append((point, fields[fields.index("-") + 1]))
    return out


def mount_points() -> list[str]:
    return [point for point, _ in mounts()]


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r.rstrip("/") or path.startswith(r.rstrip("/") + "/") for r in roots)


def node_mounts(roots: tuple[str, ...]) -> set[str]:
    """Mounts at or under `roots` (and NODE_MOUNT_ROOTS), and network namespaces wherever they are."""
    roots = tuple(roots) + NODE_MOUNT_ROOTS
    return {f"{point} ({fstype})" for point, fstype in mounts()
            if (fstype == "nsfs" or _under(point, roots)) and not _under(point, OTHER_TOOLS_MOUNTS)}


def links() -> set[str]:
    out = _run("ip", "-o", "link", "show").stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line.strip()}


def command_lines(*argv: str) -> set[str]:
    """The output lines of a command, whitespace-normalised, as a set (for before/after comparisons)."""
    return {re.sub(r"\s+", " ", line).strip() for line in _run(*argv).stdout.splitlines() if line.strip()}


def iptables_rules() -> set[str]:
    """Every iptables/ip6tables rule and chain, without packet counters."""
    rules = set()
    for binary in IPTABLES:
        if not shutil.which(f"{binary}-save"):
            continue
        table = ""
        for line in _run(f"{binary}-save").stdout.splitlines():
            if line.startswith("#") or line == "COMMIT" or not line.strip():
                continue
            if line.startswith("*"):
                table = line[1:]
                continue
            rules.add(f"{binary} {table} " + re.sub(r" \[\d+:\d+\]$", "", line))
    return rules


def nft_tables() -> set[str]:
    if not shutil.which("nft"):
        return set()
    return command_lines("nft", "list", "tables")


def cgroup_dirs(depth: int = 3) -> set[str]:
    """The node's cgroup directories (NODE_CGROUP_MARKERS in their path) down to `depth` levels, in
    every hierarchy (v1 and the unified one)."""
    found = set()
    if not CGROUP_FS.is_dir():
        return found
    for hierarchy in CGROUP_FS.iterdir():
        if not hierarchy.is_dir():
            continue
        for root, dirs, _ in os.walk(hierarchy):
            rel = Path(root).relative_to(hierarchy)
            if len(rel.parts) >= depth:
                dirs[:] = []
            if rel.parts and any(m in str(rel) for m in NODE_CGROUP_MARKERS):
                found.add(f"{hierarchy.name}:/{rel}")
    return found


def sysctls() -> dict[str, str]:
    values = {}
    base = Path("/proc/sys")
    for tree in SYSCTL_TREES:
        for root, _, files in os.walk(base / tree):
            for name in files:
                path = Path(root) / name
                key = str(path.relative_to(base))
                if VOLATILE_SYSCTL.search(key) or not os.access(path, os.R_OK):
                    continue
                try:
                    values[key] = " ".join(path.read_text().split())
                except OSError:
                    continue
    return values


def node_processes() -> set[str]:
    """`name pid` of every live process whose executable is one of NODE_PROCESSES."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            name = os.path.basename(os.readlink(proc / "exe")).removesuffix(" (deleted)")
        except OSError:
            continue
        if name in NODE_PROCESSES:
            found.add(f"{name} {proc.name}")
    return found


def snapshot(mount_roots: tuple[str, ...] = ()) -> dict[str, object]:
    """Everything the node may change, as sets (and a dict for sysctls); `mount_roots`: the node's
    own dirs (work dir, containerd root)."""
    return {
        "mounts": node_mounts(mount_roots),
        "links": links(),
        "addresses": command_lines("ip", "-o", "addr", "show"),
        "routes": command_lines("ip", "route", "show", "table", "all") | command_lines("ip", "-6", "route", "show", "table", "all"),
        "iptables": iptables_rules(),
        "nft": nft_tables(),
        "cgroups": cgroup_dirs(),
        "sysctls": sysctls(),
        "processes": node_processes(),
        "paths": {p for p in FIXED_PATHS if os.path.lexists(p)},
    }


def to_json(snap: dict[str, object]) -> dict[str, object]:
    return {k: (sorted(v) if isinstance(v, set) else v) for k, v in snap.items()}


def from_json(data: dict[str, object]) -> dict[str, object]:
    return {k: (set(v) if isinstance(v, list) else v) for k, v in data.items()}


def leftovers(before: dict[str, object], after: dict[str, object]) -> dict[str, list[str]]:
    """What `after` has that `before` did not (`+`), lost (`-`) or changed (sysctls); pure."""
    diff: dict[str, list[str]] = {}
    for key in before.keys() | after.keys():
        old, new = before.get(key), after.get(key)
        if isinstance(old, dict) or isinstance(new, dict):
            old, new = old or {}, new or {}
            changed = [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(old.keys() | new.keys())
                       if old.get(k) != new.get(k) and k in old]  # a sysctl that appears is not ours
        else:
            old, new = set(old or ()), set(new or ())
            changed = [f"+ {x}" for x in sorted(new - old)] + [f"- {x}" for x in sorted(old - new)]
        if changed:
            diff[key] = changed
    return diff


# -- undo ----------------------------------------------------------------------------------------
def read_sysctls(keys: list[str]) -> dict[str, str]:
    out = {}
    for key in keys:
        try:
            out[key] = Path("/proc/sys", key).read_text().strip()
        except OSError:
            continue
    return out


def undo_sysctls(saved: dict[str, str]) -> list[str]:
    """Write back the saved values that differ now; returns what it restored."""
    restored = []
    for key, value in saved.items():
        path = Path("/proc/sys", key)
        try:
            if " ".join(path.read_text().split()) != " ".join(value.split()):
                path.write_text(value)
                restored.append(f"{key}={value}")
        except OSError:
            continue
    return restored


def undo_mounts(prefixes: list[str]) -> list[str]:
    """Unmount everything mounted at or under `prefixes`, deepest first (lazily if busy)."""
    prefixes = [p.rstrip("/") for p in prefixes]
    done = []
    for _ in range(3):  # bind mounts can stack: repeat until nothing is left
        mine = [m for m in mount_points() if any(m == p or m.startswith(p + "/") for p in prefixes)]
        if not mine:
            break
        for point in sorted(mine, key=lambda m: m.count("/"), reverse=True):
            if _run("umount", point).returncode != 0:
                _run("umount", "-l", point)
            done.append(point)
    return done


def cgroup_procs(rel: str) -> set[int]:
    pids = set()
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else ():
        top = hierarchy / rel.strip("/")
        for root, _, files in os.walk(top):
            if "cgroup.procs" in files:
                try:
                    pids |= {int(p) for p in (Path(root) / "cgroup.procs").read_text().split()}
                except OSError:
                    continue
    return pids


def undo_cgroups(rel: str) -> list[str]:
    """Remove cgroup `rel` and everything below it in every hierarchy. Processes still inside are
    the node's own containers: they get SIGKILL first."""
    for pid in cgroup_procs(rel):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 10
    while cgroup_procs(rel) and time.monotonic() < deadline:
        time.sleep(0.1)
    removed = []
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else ():
        top = hierarchy / rel.strip("/")
        if not top.is_dir():
            continue
        for root, _, _ in sorted(os.walk(top), key=lambda t: t[0].count("/"), reverse=True):
            for _ in range(50):  # a cgroup whose last task just exited can be busy for a moment
                try:
                    os.rmdir(root)
                    removed.append(f"{hierarchy.name}:{root[len(str(hierarchy)):]}")
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
    return removed


def make_cgroup(rel: str) -> list[str]:
    """Create cgroup `rel` in every hierarchy (kubelet's cgroupRoot must exist); returns the new ones."""
    made = []
    for hierarchy in CGROUP_FS.iterdir() if CGROUP_FS.is_dir() else ():
        if not (hierarchy / "cgroup.procs").exists():
            continue
        path = hierarchy / rel.strip("/")
        if path.exists():
            continue
        path.mkdir()
        made.append(hierarchy.name)
        if hierarchy.name == "cpuset":  # a v1 cpuset child starts empty and refuses tasks
            for f in ("cpuset.cpus", "cpuset.mems"):
                (path / f).write_text((hierarchy / f).read_text())
    return made


def undo_links(names: list[str]) -> list[str]:
    """Delete the links `names` and every veth still attached to one of them."""
    present = links()
    removed = []
    for name in names:
        if name not in present:
            continue
        for line in _run("ip", "-o", "link", "show", "master", name).stdout.splitlines():
            port = line.split(":")[1].strip().split("@")[0]
            _run("ip", "link", "delete", port)
            removed.append(port)
        _run("ip", "link", "delete", name)
        removed.append(name)
    return removed


def undo_routes(routes: list[str]) -> list[str]:
    removed = []
    for route in routes:
        if _run("ip", "route", "del", *route.split()).returncode == 0:
            removed.append(route)
    return removed


def _chains(binary: str, table: str) -> tuple[list[str], list[str]]:
    """(chains, rules) of one table as `-S` prints them."""
    out = _run(binary, "-w", "5", "-t", table, "-S").stdout.splitlines()
    chains = [line.split()[1] for line in out if line.startswith(("-N ", "-P "))]
    rules = [line for line in out if line.startswith("-A ")]
    return chains, rules


def undo_iptables(baseline: set[str]) -> list[str]:
    """Delete the node's chains (KUBE-*, CNI-*, CAUSALFLOW-*) that the baseline did not have, and
    every rule elsewhere that jumps to them."""
    removed = []
    for binary in IPTABLES:
        if not shutil.which(binary):
            continue
        for table in IPTABLES_TABLES:
            chains, rules = _chains(binary, table)
            owned = {c for c in chains if c.startswith(OWNED_CHAIN_PREFIXES)
                     and f"{binary} {table} :{c} -" not in baseline}
            for rule in rules:
                parts = shlex.split(rule)  # comments are quoted
                target = parts[parts.index("-j") + 1] if "-j" in parts else None
                if parts[1] not in owned and target in owned:
                    _run(binary, "-w", "5", "-t", table, "-D", *parts[1:])
                    removed.append(f"{binary} {table} {rule}")
            for chain in owned:
                _run(binary, "-w", "5", "-t", table, "-F", chain)
            for chain in owned:
                if _run(binary, "-w", "5", "-t", table, "-X", chain).returncode == 0:
                    removed.append(f"{binary} {table} chain {chain}")
    return removed


def undo_nft_tables(baseline: set[str]) -> list[str]:
    """Delete nftables tables the baseline did not have and that hold no rule any more (what
    iptables-nft leaves behind once its chains are gone), and kube-proxy's own tables."""
    removed = []
    for line in sorted(nft_tables() - baseline):
        _, family, name = line.split()
        listing = _run("nft", "list", "table", family, name).stdout
        has_rules = any(l.strip() and not l.strip().startswith(("table", "chain", "type", "policy", "}"))
                        for l in listing.splitlines())
        if name == "kube-proxy" or not has_rules:
            if _run("nft", "delete", "table", family, name).returncode == 0:
                removed.append(line)
    return removed


def undo_paths(baseline: set[str]) -> list[str]:
    """Remove the hard-coded paths (FIXED_PATHS) that did not exist before the node started."""
    removed = []
    for path in FIXED_PATHS:
        if path in baseline or not os.path.lexists(path):
            continue
        undo_mounts([path])
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def kill_processes(pids: list[int], timeout: float = 10) -> None:
    """SIGTERM, then SIGKILL, the given processes (the node's own, by PID)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)


def pid_alive(pid: int | None) -> bool:
    """True for a live process; a zombie (exited, not yet reaped) counts as gone."""
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def processes_under(path: str, names: tuple[str, ...] = NODE_PROCESSES) -> list[int]:
    """PIDs of node processes (by executable name) whose command line mentions `path`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            name = os.path.basename(os.readlink(proc / "exe")).removesuffix(" (deleted)")
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if name in names and path in cmdline:
            found.append(int(proc.name))
    return found
