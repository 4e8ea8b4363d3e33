"""`python -m tests.cluster up|down|status`: the local control plane outside pytest.

`up` starts it in the background (state in .cluster/ at the repository root) and prints the
`export KUBECONFIG=...` line; `down` stops every process it started, by PID, and removes .cluster/.
"""

from __future__ import annotations

import argparse
import sys

from tests.cluster.cluster import REPO, LocalCluster, pid_alive

STATE_DIR = REPO / ".cluster"


def up() -> int:
    if (STATE_DIR / "state.json").exists():
        cluster = LocalCluster.attach(STATE_DIR)
        if all(pid_alive(pid) for pid in cluster.pids.values()):
            print(f"already running\nexport KUBECONFIG={cluster.kubeconfig}")
            return 0
        print("stale cluster state found: cleaning it up first")
        cluster.stop()
    print("starting the local control plane (etcd, kube-apiserver, controllers, kwok GPU nodes)...")
    cluster = LocalCluster(workdir=STATE_DIR, quiet=False).start()
    print(f"ready in {cluster.started_seconds:.1f}s: 2 fake GPU nodes with 8 x nvidia.com/gpu each")
    print(f"logs: {STATE_DIR / 'logs'}    stop: make cluster-down")
    print(f"export PATH={cluster.bin_dir}:$PATH")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def down() -> int:
    if not (STATE_DIR / "state.json").exists():
        print("no local cluster running")
        return 0
    cluster = LocalCluster.attach(STATE_DIR)
    pids = cluster.pids
    cluster.stop()
    left = [f"{n}:{p}" for n, p in pids.items() if pid_alive(p)]
    if left:
        print(f"could not stop: {', '.join(left)}", file=sys.stderr)
        return 1
    print(f"stopped {len(pids)} processes and removed {STATE_DIR}")
    return 0


def status() -> int:
    if not (STATE_DIR / "state.json").exists():
        print("no local cluster running")
        return 1
    cluster = LocalCluster.attach(STATE_DIR)
    for name, pid in cluster.pids.items():
        print(f"{name:20s} pid {pid:<8d} {'running' if pid_alive(pid) else 'DEAD'}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.cluster", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["up", "down", "status"])
    args = ap.parse_args()
    return {"up": up, "down": down, "status": status}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
