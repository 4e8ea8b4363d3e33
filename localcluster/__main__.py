"""`python -m localcluster up|down|status`: the local control plane outside pytest.

`up` starts it in the background (state in .cluster/ at the repository root) and prints the
`export KUBECONFIG=...` line; with the real node it also imports the product images
(localcluster/imagebuild.py) into the node and prints `export CAUSALFLOW_SERVER_IMAGE=...` and
`export CAUSALFLOW_OPERATOR_IMAGE=...` (`--no-images` skips that). `down` stops every process it
started, by PID, undoes what the real node changed on the machine (also after a crashed or killed
`up`) and removes .cluster/.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys

from localcluster.cluster import REPO, LocalCluster
from localcluster.machine import pid_alive
from localcluster.nodeconfig import NODE_KIND_LABEL, NODE_NAME, TAINT_KEY
from localcluster.realnode import RealNode

STATE_DIR = REPO / ".cluster"


def image_exports(cluster: LocalCluster, build: bool) -> list[str]:
    """Import the product images into the real node (building them first when `build`) and return
    the export lines for those it holds. Empty without a real node or without images.py."""
    if not build or cluster.real_node is None or importlib.util.find_spec("localcluster.imagebuild") is None:
        return []
    from localcluster import imagebuild as product_images

    print("building the product images and importing them into the real node (long the first time)...")
    imgs = product_images.ensure_images()
    for ref in (imgs.server_tiny, imgs.operator):
        if not cluster.has_image(ref):
            print(f"importing {ref}")
            imgs.import_into(cluster, ref)
    return [f"export {var}={ref}" for var, ref in (("CAUSALFLOW_SERVER_IMAGE", imgs.server_tiny),
                                                    ("CAUSALFLOW_OPERATOR_IMAGE", imgs.operator))
            if cluster.has_image(ref)]


def up(images: bool = True) -> int:
    if (STATE_DIR / "state.json").exists():
        cluster = LocalCluster.attach(STATE_DIR)
        if all(pid_alive(pid) for pid in cluster.pids.values()):
            print(f"already running\nexport KUBECONFIG={cluster.kubeconfig}")
            return 0
        print("stale cluster state found: cleaning it up first")
        cluster.stop()
    print("starting the local control plane (etcd, kube-apiserver, controllers, kwok GPU nodes, real node)...")
    cluster = LocalCluster(workdir=STATE_DIR, quiet=False).start()
    print(f"ready in {cluster.started_seconds:.1f}s: 2 fake GPU nodes with 8 x nvidia.com/gpu each")
    if cluster.real_node is not None:
        print(f"real node {NODE_NAME}: containerd + kubelet + kube-proxy, Ready "
              f"{cluster.real_node.ready_seconds:.1f}s after its start; pods land there with "
              f"nodeSelector {NODE_KIND_LABEL}=real and a toleration for the taint {TAINT_KEY}")
    else:
        print(f"no real node: {cluster.real_node_skipped}")
    try:
        exports = image_exports(cluster, images)
    except Exception as e:  # noqa: BLE001 - the cluster is up; say why the images are not
        print(f"the product images are not in the real node: {e}", file=sys.stderr)
        exports = []
    print(f"logs: {STATE_DIR / 'logs'}    stop: make cluster-down")
    print(f"export PATH={cluster.bin_dir}:$PATH")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    for line in exports:
        print(line)
    return 0


def down() -> int:
    if not (STATE_DIR / "state.json").exists():
        node = RealNode.from_state(STATE_DIR)
        if node is None:
            print("no local cluster running")
            return 0
        print("no cluster state, but a real node's: undoing what it changed on the machine")
        node.cleanup()
        return 0
    cluster = LocalCluster.attach(STATE_DIR)
    pids = cluster.pids
    node = cluster.real_node
    cluster.stop()
    left = [f"{n}:{p}" for n, p in pids.items() if pid_alive(p)]
    if left:
        print(f"could not stop: {', '.join(left)}", file=sys.stderr)
        return 1
    print(f"stopped {len(pids)} processes and removed {STATE_DIR}")
    if node is not None and node.last_leftovers is not None:
        if node.last_leftovers:
            print(f"the real node left this behind: {node.last_leftovers}", file=sys.stderr)
            return 1
        print("real node: nothing left on the machine (mounts, netns, links, routes, iptables, cgroups, "
              "sysctls, processes, paths checked against the snapshot taken before it started)")
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
    ap = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=["up", "down", "status"])
    ap.add_argument("--no-images", action="store_true", help="up: do not build/import the product images")
    args = ap.parse_args()
    if args.command == "up":
        return up(images=not args.no_images)
    return {"down": down, "status": status}[args.command]()


if __name__ == "__main__":
    sys.exit(main())
