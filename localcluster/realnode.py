"""A real kubelet node (`real-node-0`) beside the kwok nodes: containerd + runc + kubelet + kube-proxy.

Pods scheduled here really run: a pause sandbox, containers from images imported into containerd
(no registry), pod IPs on a bridge of this harness, HTTP probes, `kubectl logs/exec`, Services
routed by kube-proxy's iptables rules, OOM kills reported by the kernel. The node is tainted
(`causalflow.dev/real-node=true:NoSchedule`) and labelled `causalflow.dev/node-kind=real` (the
kwok nodes: `=kwok`), so only pods that tolerate the taint and select the label land here; the
kwok tests' failure stages keep acting on kwok nodes only. It advertises fake `nvidia.com/gpu`
capacity (a patch of node status) so GPU Deployments schedule; their containers run on the CPU.

Only one real node runs on a machine at a time (iptables chains and sysctls are machine-wide):
`$CAUSALFLOW_CACHE/realnode.owner` names the cluster work dir that holds it.

The settings each component gets and why, and what a running node changes on the machine:
localcluster/nodeconfig.py.

## What stop undoes (saved at start in node-state.json, so `make cluster-down` can redo it)
Pods first (cordon, delete, wait: kubelet runs CNI DEL), then `crictl rmp` of what is left,
kube-proxy/kubelet/containerd/shims by PID, mounts under the work dir (kubelet's bind mount of its
root dir, rootfs, shm, netns, volumes), the cgroup root in every hierarchy, the bridges and routes,
`kube-proxy --cleanup` then the remaining KUBE-*/CNI-* chains and empty nftables tables, the
sysctls kubelet and the bridge plugin change, and the hard-coded paths it created.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import yaml

from localcluster import machine
from localcluster.nodeconfig import (CGROUP_ROOT, COMPONENTS, FIREWALL_CHAIN, GPU_RESOURCE, GPUS, KWOK_CIDR, NODE_BRIDGE,
                                     NODE_IP, NODE_NAME, NODE_USERS, POD_BRIDGE, SERVICE_CIDR, SYSCTLS, cni_conflist,
                                     containerd_config, kube_proxy_config, kubelet_config, node_labels, stale_refs)
from localcluster.nodeimage import docker_archive, image_ref
from localcluster.ports import free_port
from localcluster.versions import built_dir, cache_root

if TYPE_CHECKING:  # pragma: no cover
    from localcluster.cluster import LocalCluster

NODE_BUILD_SCRIPT = Path(__file__).with_name("build-node-binaries.sh")
DISABLE_ENV = "CAUSALFLOW_REAL_NODE"


class RealNodeError(RuntimeError):
    """The real node could not start or stop; the message names the step and the log."""


class RealNodeInUse(RealNodeError):
    """Another cluster on this machine runs the one real node (nothing was changed)."""


def owner_file() -> Path:
    return cache_root() / "realnode.owner"


def node_binaries_dir(build: bool = True) -> Path:
    """The node binaries' cache dir, building them first (minutes, once) when missing."""
    return built_dir(NODE_BUILD_SCRIPT, build)


def disabled_by_env(env: dict[str, str] | os._Environ = os.environ) -> bool:
    return env.get(DISABLE_ENV, "").strip().lower() in ("0", "false", "no", "off")


def missing_prerequisites(bin_dir: Path) -> list[str]:
    """Why a real node cannot run on this machine (empty: it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("not running as root (kubelet, containerd and runc need root)")
    for name in ("kubelet", "kube-proxy", "containerd", "ctr", "crictl", "containerd-shim-runc-v2",
                 "bridge", "host-local", "loopback", "portmap", "pause", "causalflow-nodetest"):
        if not (bin_dir / name).is_file():
            missing.append(f"{bin_dir / name} not built (bash {NODE_BUILD_SCRIPT})")
    for tool in ("runc", "iptables", "ip6tables", "iptables-save", "conntrack", "nft", "ip", "mount"):
        if not shutil.which(tool):
            missing.append(f"`{tool}` not installed (apt-get install runc iptables conntrack nftables iproute2)")
    if "overlay" not in Path("/proc/filesystems").read_text():
        missing.append("the kernel has no overlay filesystem")
    if not (machine.CGROUP_FS / "memory" / "cgroup.procs").exists() and not (machine.CGROUP_FS / "cgroup.controllers").exists():
        missing.append("no cgroup memory controller mounted under /sys/fs/cgroup")
    return missing


# -- the node ----------------------------------------------------------------------------------------
class RealNode:
    """Start/stop of the real node for one LocalCluster; its state lives in <workdir>/realnode/."""

    def __init__(self, workdir: Path, bin_dir: Path) -> None:
        self.dir = Path(workdir) / "realnode"
        self.bin_dir = Path(bin_dir)
        self.state: dict[str, Any] = {}
        self.ready_seconds: float | None = None
        self.last_leftovers: dict[str, list[str]] | None = None  # set by stop()

    @property
    def state_file(self) -> Path:
        return self.dir / "node-state.json"

    @property
    def containerd_root(self) -> Path:
        return cache_root() / "containerd-root"

    @property
    def mount_roots(self) -> tuple[str, ...]:
        return (str(self.dir), str(self.containerd_root))

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    @property
    def test_image(self) -> str:
        """The tests' image (localcluster/nodeimages/nodetest): serve | echo | crash | oom."""
        return self.state["test_image"]

    @classmethod
    def from_state(cls, workdir: Path) -> RealNode | None:
        node = cls(workdir, Path("."))
        if not node.state_file.exists():
            return None
        node.state = json.loads(node.state_file.read_text())
        node.bin_dir = Path(node.state["bin_dir"])
        return node

    def _save(self, **changes: Any) -> None:
        """Record before acting, so a crash at any point leaves a state stop can undo."""
        self.state.update(changes)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.state_file)

    # -- tools ---------------------------------------------------------------------------------------
    def ctr(self, *args: str, timeout: float = 600, check: bool = True,
            stdin: IO[bytes] | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin_dir / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args],
                              stdin=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def crictl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin_dir / "crictl"), f"--runtime-endpoint=unix://{self.socket}",
                               f"--image-endpoint=unix://{self.socket}", "--timeout=20s", *args],
                              capture_output=True, text=True, timeout=timeout)

    def has_image(self, ref: str) -> bool:
        return ref in self.ctr("images", "ls", "-q").stdout.split()

    def content_digests(self) -> set[str]:
        """The digests of every blob (layers, manifests, configs) in the k8s.io content store."""
        return set(self.ctr("content", "ls", "-q").stdout.split())

    def import_image(self, archive: Path | IO[bytes], ref: str | None = None) -> None:
        """`ctr -n k8s.io images import` of a docker-archive or oci-archive (unpacked for the CRI),
        from a file or from a pipe (`Images.stream`).

        With `ref` (the tag the archive holds), the other tags of its repository are removed
        afterwards: the harness tags its images by content, so another tag is an older build that
        nothing here runs any more, and the store persists across clusters (the server images are
        GBs each, so without this it grows by one image per source change)."""
        if isinstance(archive, Path):
            self.ctr("images", "import", "--snapshotter", "overlayfs", str(archive), timeout=1800)
        else:
            self.ctr("images", "import", "--snapshotter", "overlayfs", "-", timeout=1800, stdin=archive)
        if ref is not None:
            self.remove_other_tags(ref)

    def remove_other_tags(self, ref: str) -> list[str]:
        """Remove every image of `ref`'s repository but `ref`, with the image-id refs the CRI made
        for them (`stale_refs`); containerd's garbage collector then frees the layers no image
        references. Returns the refs removed."""
        old = stale_refs(self.ctr("images", "ls").stdout, ref)
        if old:
            self.ctr("images", "rm", "--sync", *old)
        return old

    def ensure_own_image(self, name: str, entrypoint: list[str]) -> str:
        binary = self.bin_dir / name
        ref = image_ref(name, binary)
        if not self.has_image(ref):
            archive = docker_archive(ref, binary, entrypoint, self.dir / f"{name}.tar")
            self.import_image(archive, ref)
            archive.unlink()
        return ref

    # -- start ---------------------------------------------------------------------------------------
    def start(self, cluster: LocalCluster) -> None:
        """Bring the node up and wait until it is Ready with its GPU capacity; stop() undoes it all.
        `ready_seconds`: from here (the control plane already up) to the node's Ready condition."""
        t0 = time.monotonic()
        prev = RealNode.from_state(self.dir.parent)
        if prev is not None and not prev.state.get("cleaned"):
            prev.cleanup()  # a node this work dir ran before (crashed or killed)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.claim()
        self.dir.mkdir(parents=True)
        baseline = machine.snapshot(self.mount_roots)
        (self.dir / "baseline.json").write_text(json.dumps(machine.to_json(baseline)))
        self._save(bin_dir=str(self.bin_dir), workdir=str(self.dir.parent),
                   sysctls=machine.read_sysctls(list(SYSCTLS)),
                   iptables_baseline=sorted(baseline["iptables"]), nft_baseline=sorted(baseline["nft"]),
                   paths_baseline=sorted(baseline["paths"]), links=[], routes=[], cgroup_root=None)
        self._network()
        self._firewall()
        self._save(cgroup_root=CGROUP_ROOT)
        machine.make_cgroup(CGROUP_ROOT)
        self._write_files(cluster)
        self._start_containerd(cluster)
        self.state["sandbox_image"] = self.ensure_own_image("pause", ["/pause"])
        self.state["test_image"] = self.ensure_own_image("causalflow-nodetest", ["/causalflow-nodetest"])
        self._save()
        self._start_kubelet(cluster)
        self._advertise_gpus(cluster)
        self._start_kube_proxy(cluster)
        self._in_cluster_api(cluster)
        self._wait_node_ready(cluster)
        self.ready_seconds = time.monotonic() - t0

    def _wait_node_ready(self, cluster: LocalCluster) -> None:
        def ready() -> bool:
            node = cluster.get_object("node", NODE_NAME) or {"status": {}}
            return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))

        cluster.wait_ready(f"{NODE_NAME} Ready", ready, 90)

    def claim(self) -> None:
        """Take the machine's one real-node slot for this work dir (from the cluster's __init__ on,
        so two clusters starting together cannot both get it); a dead earlier owner is cleaned up.
        Raises RealNodeInUse, having changed nothing, when another live cluster holds it."""
        owner = owner_file()
        owner.parent.mkdir(parents=True, exist_ok=True)
        mine = str(self.dir.parent)
        if owner.exists():
            data = json.loads(owner.read_text())
            if data.get("workdir") != mine:
                prev = RealNode.from_state(Path(data["workdir"]))
                if machine.pid_alive(data.get("pid")) or (prev is not None and prev.alive()):
                    raise RealNodeInUse(
                        f"this machine's one real node is in use by the cluster in {data['workdir']} (stop it: "
                        f"make cluster-down, or {DISABLE_ENV}=0 for a cluster without a real node)")
                if prev is not None and not prev.state.get("cleaned"):
                    prev.cleanup()
        tmp = owner.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"workdir": mine, "pid": os.getpid()}))
        tmp.replace(owner)

    def alive(self) -> bool:
        """Whether a recorded node process (containerd, kubelet, kube-proxy) still runs."""
        for name, pid in self.state.get("pids", {}).items():
            try:
                if pid and os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith(name):
                    return True
            except OSError:
                continue
        return False

    def _network(self) -> None:
        conflicts = [a for a in machine.command_lines("ip", "-o", "addr", "show") if "172.30." in a]
        if conflicts:
            raise RealNodeError(f"172.30.0.0/16 is already in use on this machine: {conflicts}")
        self._save(links=[NODE_BRIDGE, POD_BRIDGE],
                   routes=[f"{SERVICE_CIDR} dev {NODE_BRIDGE}", f"blackhole {KWOK_CIDR}"])
        for argv in (["link", "add", NODE_BRIDGE, "type", "bridge"], ["addr", "add", f"{NODE_IP}/32", "dev", NODE_BRIDGE],
                     ["link", "set", NODE_BRIDGE, "up"], ["link", "add", POD_BRIDGE, "type", "bridge"],
                     ["link", "set", POD_BRIDGE, "up"],
                     ["route", "add", SERVICE_CIDR, "dev", NODE_BRIDGE, "src", NODE_IP],
                     ["route", "add", "blackhole", KWOK_CIDR]):
            proc = subprocess.run(["ip", *argv], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RealNodeError(f"ip {' '.join(argv)}: {proc.stderr.strip()}")

    def _write_files(self, cluster: LocalCluster) -> None:
        d = self.dir
        for sub in ("cni", "cni-ipam", "kubelet", "pod-logs", "volume-plugins", "containerd-tmp", "runc"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        (d / "resolv.conf").write_text("")
        (d / "cni" / "10-causalflow.conflist").write_text(json.dumps(cni_conflist(d), indent=1))
        self.containerd_root.mkdir(parents=True, exist_ok=True)
        for user, name in zip(NODE_USERS, ("kubelet", "kube-proxy")):
            path = d / f"{name}.kubeconfig"
            path.write_text(cluster.kubeconfig_for(user))
            path.chmod(0o600)
        ports = {"kubelet": free_port(), "kubelet-healthz": free_port(),
                 "kube-proxy-healthz": free_port(), "kube-proxy-metrics": free_port()}
        self._save(ports=ports)
        (d / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(d, ports["kubelet"], ports["kubelet-healthz"])))
        (d / "kube-proxy.yaml").write_text(yaml.safe_dump(
            kube_proxy_config(d / "kube-proxy.kubeconfig", ports["kube-proxy-healthz"], ports["kube-proxy-metrics"])))

    def _pids(self, cluster: LocalCluster) -> None:
        self._save(pids={n: cluster.components[n].pid for n in COMPONENTS if n in cluster.components})

    def _start_containerd(self, cluster: LocalCluster) -> None:
        runc = shutil.which("runc") or "runc"
        # The sandbox image's tag is the pause binary's hash: known before containerd runs.
        sandbox = image_ref("pause", self.bin_dir / "pause")
        (self.dir / "containerd.toml").write_text(
            containerd_config(self.dir, self.containerd_root, self.bin_dir, runc, sandbox))
        self._save(shim_dir_existed=os.path.lexists("/run/containerd"))
        env = {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        cluster.start_component("containerd", [str(self.bin_dir / "containerd"), "--config",
                                          str(self.dir / "containerd.toml")], env=env)
        self._pids(cluster)
        cluster.wait_ready("containerd", lambda: self.ctr("version", timeout=5, check=False).returncode == 0, 60)
        self._remove_stale_pods()

    def restart_containerd(self, cluster: LocalCluster, timeout: float = 60) -> float:
        """Stop the node's containerd (SIGTERM to the process this node started, by PID) and start
        it again with the same config, as an upgrade or a crash of the runtime would; the runc
        shims, and the containers they hold, keep running meanwhile. Returns the seconds from
        the stop until the new containerd answers."""
        comp = cluster.components["containerd"]
        t0 = time.monotonic()
        comp.stop(timeout=20)
        comp.start()
        self._pids(cluster)
        cluster.save_state()
        cluster.wait_ready("containerd", lambda: self.ctr("version", timeout=5, check=False).returncode == 0, timeout)
        return time.monotonic() - t0

    def _remove_stale_pods(self, timeout: float = 60) -> None:
        """containerd's root persists: drop sandboxes/containers a crashed earlier node left in it.
        containerd answers `ctr` before its CRI service serves (it loads the stored sandboxes
        first), so the listing is retried until it succeeds: an empty stdout of a failed one is not
        "nothing left" (a killed node's sandbox outlived a restart that way, on a busy machine)."""
        deadline = time.monotonic() + timeout
        while (listed := self.crictl("pods", "-q", timeout=30)).returncode != 0:
            if time.monotonic() > deadline:
                raise RealNodeError(f"containerd's CRI service did not list pod sandboxes: {listed.stderr.strip()}")
            time.sleep(0.5)
        if listed.stdout.strip():
            proc = self.crictl("rmp", "-a", "-f", timeout=120)
            if proc.returncode != 0:
                raise RealNodeError(f"removing stale pod sandboxes failed: {proc.stderr.strip()}")

    def _start_kubelet(self, cluster: LocalCluster) -> None:
        d = self.dir
        labels = ",".join(f"{k}={v}" for k, v in node_labels().items())
        cluster.start_component("kubelet", [
            str(self.bin_dir / "kubelet"), f"--config={d / 'kubelet.yaml'}", f"--kubeconfig={d / 'kubelet.kubeconfig'}",
            f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet-pki'}", f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}", f"--node-labels={labels}",
        ], env={**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
        self._pids(cluster)

        def registered() -> bool:
            return cluster.kubectl("get", "node", NODE_NAME, check=False, timeout=10).returncode == 0

        cluster.wait_ready("kubelet", registered, 90)

    def _advertise_gpus(self, cluster: LocalCluster) -> None:
        patch = {"status": {"capacity": {GPU_RESOURCE: str(GPUS)}}}
        cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=merge", "-p", json.dumps(patch))

        def advertised() -> bool:
            node = cluster.get_object("node", NODE_NAME) or {"status": {}}
            return node["status"].get("allocatable", {}).get(GPU_RESOURCE) == str(GPUS)

        cluster.wait_ready(f"{GPU_RESOURCE} on {NODE_NAME}", advertised, 60)

    def _in_cluster_api(self, cluster: LocalCluster) -> None:
        """Pods reach the API server the in-cluster way: the `kubernetes` Service (10.96.0.1:443)
        -> an EndpointSlice on the node IP -> localcluster/tcp_relay.py -> 127.0.0.1."""
        port = cluster.ports["apiserver"]  # free on the node IP: the API server binds 127.0.0.1 only
        cluster.start_component("apiserver-relay", [sys.executable, "-m", "localcluster.tcp_relay",
                                               f"--listen={NODE_IP}:{port}", f"--to=127.0.0.1:{port}"],
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        self._pids(cluster)
        cluster.apply({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes-real-node", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes",
                                    "endpointslice.kubernetes.io/managed-by": "causalflow-harness"}},
            "addressType": "IPv4", "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        })

        def relaying() -> bool:
            with socket.create_connection((NODE_IP, port), timeout=2):
                return True

        cluster.wait_ready("apiserver-relay", relaying, 30)

    def _firewall(self) -> None:
        """Pod traffic may go to the host and to other pods, never through the host to elsewhere."""
        for argv in (["-N", FIREWALL_CHAIN],
                     ["-A", FIREWALL_CHAIN, "-i", POD_BRIDGE, "!", "-o", POD_BRIDGE, "-j", "DROP"],
                     ["-I", "FORWARD", "1", "-j", FIREWALL_CHAIN]):
            proc = subprocess.run(["iptables", "-w", "5", *argv], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RealNodeError(f"iptables {' '.join(argv)}: {proc.stderr.strip()}")

    def _start_kube_proxy(self, cluster: LocalCluster) -> None:
        cluster.start_component("kube-proxy", [str(self.bin_dir / "kube-proxy"), f"--config={self.dir / 'kube-proxy.yaml'}"],
                           env={**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"})
        self._pids(cluster)
        port = self.state["ports"]["kube-proxy-healthz"]

        def healthy() -> bool:
            import urllib.request
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return r.status == 200

        cluster.wait_ready("kube-proxy", healthy, 60)

    # -- stop ----------------------------------------------------------------------------------------
    def drain(self, cluster: LocalCluster | None, timeout: float = 90) -> None:
        """Delete the node's pods through the API (kubelet then runs CNI DEL) and wait for it."""
        if cluster is None or "kubelet" not in cluster.components or not cluster.components["kubelet"].alive():
            return
        try:
            cluster.kubectl("cordon", NODE_NAME, check=False, timeout=15)
            cluster.kubectl("delete", "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}",
                            "--grace-period=1", "--wait=false", check=False, timeout=30)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                left = cluster.kubectl("get", "pods", "-A", f"--field-selector=spec.nodeName={NODE_NAME}",
                                       "-o", "name", check=False, timeout=15).stdout.split()
                ready = self.crictl("pods", "--state", "ready", "-q").stdout.split()
                if not left and not ready:
                    return
                time.sleep(0.5)
        except (subprocess.SubprocessError, OSError):
            return

    def stop(self, cluster: LocalCluster | None) -> None:
        """Pods, then processes, then everything they changed on the machine."""
        self.drain(cluster)
        if cluster is not None:
            for name in ("apiserver-relay", "kube-proxy", "kubelet"):
                comp = cluster.components.pop(name, None)
                if comp is not None:
                    comp.stop()
            # A later start (same cluster) registers afresh: labels, taint, no cordon.
            try:
                cluster.kubectl("delete", "node", NODE_NAME, "--wait=false", check=False, timeout=15)
            except (subprocess.SubprocessError, OSError):
                pass
            if cluster.components.get("containerd") is not None and cluster.components["containerd"].alive():
                self.crictl("rmp", "-a", "-f", timeout=120)
            comp = cluster.components.pop("containerd", None)
            if comp is not None:
                comp.stop(timeout=20)
        self.cleanup()
        if (self.dir / "baseline.json").exists():
            self.last_leftovers = self.leftovers()

    def cleanup(self) -> dict[str, list[str]]:
        """Undo every machine change recorded in node-state.json (idempotent); returns what it did."""
        st, done = self.state, {}
        workdir = str(self.dir)
        pids = [p for p in st.get("pids", {}).values() if p and Path(f"/proc/{p}").exists()]
        # Node processes of this node that are still alive: kube-proxy, kubelet, containerd, shims.
        machine.kill_processes(pids + machine.processes_under(workdir))
        # Then what still runs in the node's containers (all inside its cgroup root).
        done["cgroups"] = machine.undo_cgroups(st["cgroup_root"]) if st.get("cgroup_root") else []
        runc_root = self.dir / "runc"
        if runc_root.is_dir() and shutil.which("runc"):
            for cid in (p.name for p in runc_root.iterdir()):
                subprocess.run(["runc", "--root", str(runc_root), "delete", "--force", cid], capture_output=True)
        # rootfs, shm, netns, volumes and kubelet's bind mount of its root dir: all in the work dir.
        done["mounts"] = machine.undo_mounts([workdir])
        done["links"] = machine.undo_links(st.get("links", []))
        done["routes"] = machine.undo_routes(st.get("routes", []))
        if (self.bin_dir / "kube-proxy").exists() and st.get("ports"):
            subprocess.run([str(self.bin_dir / "kube-proxy"), "--cleanup", "--v=0"], capture_output=True, timeout=60)
        done["iptables"] = machine.undo_iptables(set(st.get("iptables_baseline", [])))
        done["nft"] = machine.undo_nft_tables(set(st.get("nft_baseline", [])))
        done["sysctls"] = machine.undo_sysctls(st.get("sysctls", {}))
        baseline_paths = set(st.get("paths_baseline", machine.FIXED_PATHS))
        done["paths"] = machine.undo_paths(baseline_paths)
        owner = owner_file()
        if owner.exists() and json.loads(owner.read_text()).get("workdir") == str(self.dir.parent):
            owner.unlink()
        if self.dir.is_dir():
            self._save(pids={}, cleaned=True)
        return done

    def leftovers(self) -> dict[str, list[str]]:
        """The machine now against the baseline taken before this node started (empty: clean)."""
        before = machine.from_json(json.loads((self.dir / "baseline.json").read_text()))
        return machine.leftovers(before, machine.snapshot(self.mount_roots))


