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

## Settings, and why each is needed on this machine

containerd (config version 3):
- `restrict_oom_score_adj = true`: root here lacks CAP_SYS_RESOURCE, so runc cannot write the
  negative oom_score_adj kubelet asks for (sandbox -998); without it every sandbox fails with
  `can't get final child's PID from pipe: EOF`.
- runc `SystemdCgroup = false` (no systemd), runc `Root`, `state`, the gRPC/ttrpc sockets, the CNI
  conf dir and `netns_mounts_under_state_dir = true`: everything volatile inside the work dir.
  Shim sockets still go to /run/containerd/s (hard-coded): stop removes it if it made it.
- `root` (image content and snapshots) persists in `$CAUSALFLOW_CACHE/containerd-root`: importing
  the server image (torch) is then a one-time cost. Only one containerd uses it at a time.
- the sandbox image is pinned to the harness's own pause image; NRI (its socket in /run/nri), the
  TCP CRI service and tracing are off; CDI reads a dir in the work dir, not /etc/cdi and
  /var/run/cdi; the CRI streaming server (exec, logs -f, port-forward) listens on 127.0.0.1.

kubelet (KubeletConfiguration):
- `failCgroupV1: false` + `cgroupDriver: cgroupfs`: the machine mounts cgroup v1 (no systemd),
  and kubelet 1.35+ exits at once on v1 unless told to run.
- `cgroupRoot: /causalflow-realnode` (created by the harness in every hierarchy): the node's pod
  cgroups sit under one root that stop removes whole.
- `address` = node IP, `readOnlyPort: 0`, healthz on 127.0.0.1: nothing listens on other
  addresses. Anonymous auth with AlwaysAllow: the API server reaches it without client certs (the
  port is only on the harness's own bridge).
- `resolvConf` = an empty file: pods never use the machine's resolver (no cluster DNS here), so no
  DNS query leaves the machine. `failSwapOn: false`, low eviction thresholds, image GC off (images
  are imported, never pulled back), `podLogsDir`, `volumePluginDir` in the work dir.
- static token of a harness user (no TLS bootstrap), `--hostname-override`, `--node-ip`.

kube-apiserver: `--kubelet-preferred-address-types=InternalIP`, or logs/exec/port-forward resolve
the node name through the machine's resolver (a DNS query off the machine, and "no such host").

kwok: `--manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake`,
or kwok takes over the real node's status too.

Network:
- node IP 172.30.0.1/32 on an empty bridge `cfo-node` of the harness: kubelet refuses loopback node
  IPs and this kernel has no dummy links.
- pods on bridge `cfo-pods`, 172.30.1.0/24 (CNI bridge + host-local + portmap + loopback),
  `ipMasq: false`, IPAM state in the work dir.
- kube-proxy in iptables mode with `nodePortAddresses` = the node IP, `localhostNodePorts: false`
  and conntrack left as it is (`maxPerCore: 0`, timeouts 0).
- a route for the Service CIDR onto `cfo-node`, so an untranslated Service address can never leave
  through the uplink, and a blackhole route for kwok's fake pod range 10.0.0.0/16, so nothing can
  reach a kwok pod's (fake) address by accident, even through a Service.
- an iptables chain CAUSALFLOW-REALNODE first in FORWARD drops what pods send through the host to
  anywhere but the pod bridge (the bridge plugin turns on ip_forward): no pod packet leaves the
  machine, even from a pod that tries.
- the API server listens on 127.0.0.1 only, which pods cannot reach: a TCP relay on the node IP
  (localcluster/tcp_relay.py) behind an EndpointSlice of the `kubernetes` Service gives pods the
  in-cluster way in (10.96.0.1:443, the serving cert names it).

## What a running node changes on the machine (measured with one pod running)
- sysctls: kernel.panic 1->10, kernel.panic_on_oops 0->1, vm.overcommit_memory 0->1 (kubelet);
  net.ipv4.ip_forward and conf.{all,default}.forwarding 0->1, conf.all.accept_redirects 1->0
  (the bridge plugin, and the kernel with forwarding on);
- paths whatever the flags say: /run/containerd (shim sockets), /var/lib/kubelet (device-plugins),
  /var/log/containers (log symlinks), /var/lib/cni (libcni's result cache);
- links cfo-node, cfo-pods and one veth per pod; the routes above; iptables-nft tables ip/ip6
  filter, nat, mangle with KUBE-*, CNI-* and CAUSALFLOW-REALNODE chains;
- mounts (all in the work dir): netns (nsfs), sandbox shm, container rootfs (overlay), kubelet's
  bind mount of its root dir, projected volumes (tmpfs); cgroups under /causalflow-realnode.

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
from localcluster.nodeimage import docker_archive, image_ref
from localcluster.ports import free_port

if TYPE_CHECKING:  # pragma: no cover
    from localcluster.cluster import LocalCluster

NODE_NAME = "real-node-0"
NODE_KIND_LABEL = "causalflow.dev/node-kind"
TAINT_KEY = "causalflow.dev/real-node"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
NODE_SELECTOR = {NODE_KIND_LABEL: "real"}
GPU_RESOURCE = "nvidia.com/gpu"
GPUS = 4
NODE_BRIDGE, POD_BRIDGE = "cfo-node", "cfo-pods"
NODE_IP = "172.30.0.1"
POD_CIDR, POD_GATEWAY = "172.30.1.0/24", "172.30.1.1"
KWOK_CIDR = "10.0.0.0/16"  # kwok's --cidr (cluster.py)
SERVICE_CIDR = "10.96.0.0/16"  # the API server's --service-cluster-ip-range (cluster.py)
CGROUP_ROOT = "causalflow-realnode"
NODE_USERS = ("causalflow-real-node", "causalflow-kube-proxy")
COMPONENTS = ("containerd", "kubelet", "kube-proxy", "apiserver-relay")
FIREWALL_CHAIN = "CAUSALFLOW-REALNODE"
# Sysctls kubelet (setupKernelTunables), the bridge plugin and kube-proxy may change.
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
           "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
           "net/ipv4/conf/all/forwarding", "net/ipv6/conf/all/forwarding", "net/ipv4/conf/all/route_localnet",
           "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables",
           "net/netfilter/nf_conntrack_max", "net/netfilter/nf_conntrack_tcp_timeout_established",
           "net/netfilter/nf_conntrack_tcp_timeout_close_wait")
NODE_BUILD_SCRIPT = Path(__file__).with_name("build-node-binaries.sh")
DISABLE_ENV = "CAUSALFLOW_REAL_NODE"


class RealNodeError(RuntimeError):
    """The real node could not start or stop; the message names the step and the log."""


class RealNodeInUse(RealNodeError):
    """Another cluster on this machine runs the one real node (nothing was changed)."""


def cache_root() -> Path:
    return Path(os.environ.get("CAUSALFLOW_CACHE", Path.home() / ".cache" / "causalflow-ocr"))


def owner_file() -> Path:
    return cache_root() / "realnode.owner"


def node_binaries_dir(build: bool = True) -> Path:
    """The node binaries' cache dir, building them first (minutes, once) when missing."""
    if build:
        subprocess.run(["bash", str(NODE_BUILD_SCRIPT)], check=True)
    out = subprocess.run(["bash", str(NODE_BUILD_SCRIPT), "--print-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return Path(out)


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


def _pid_alive(pid: int | None) -> bool:
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


# -- configuration (pure) ----------------------------------------------------------------------------
NO_NRI_NO_TRACING = ("io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp",
                     "io.containerd.internal.v1.tracing")


def containerd_core_config(root: Path, state: Path, temp: Path, sockets: Path, disabled: tuple[str, ...],
                           level: str = "info") -> str:
    """The top of a containerd config: persistent `root`, volatile state, temp and sockets, no
    debug or metrics listener."""
    q = json.dumps  # TOML basic strings are JSON strings
    return f"""version = 3
root = {q(str(root))}
state = {q(str(state))}
temp = {q(str(temp))}
disabled_plugins = {q(list(disabled))}

[grpc]
  address = {q(str(sockets / "containerd.sock"))}
[ttrpc]
  address = {q(str(sockets / "containerd.sock.ttrpc"))}
[debug]
  address = ""
  level = {q(level)}
[metrics]
  address = ""
"""


def containerd_config(d: Path, root: Path, bin_dir: Path, runc: str, sandbox_image: str) -> str:
    q = json.dumps  # TOML basic strings are JSON strings
    core = containerd_core_config(root, d / "containerd-state", d / "containerd-tmp", d, NO_NRI_NO_TRACING)
    return core + f"""
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {q(sandbox_image)}

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = [{q(str(d / "cdi"))}]
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = {q(runc)}
        Root = {q(str(d / "runc"))}
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [{q(str(bin_dir))}]
    conf_dir = {q(str(d / "cni"))}
    max_conf_num = 1
"""


def cni_conflist(d: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0", "name": "causalflow-pods",
        "plugins": [
            {"type": "bridge", "bridge": POD_BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(d / "cni-ipam"),
                      "ranges": [[{"subnet": POD_CIDR, "gateway": POD_GATEWAY}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}, "snat": False},
        ],
    }


def kubelet_config(d: Path, port: int, healthz_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}",
        "cgroupsPerQOS": True, "enforceNodeAllocatable": ["pods"],
        "address": NODE_IP, "port": port, "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1", "healthzPort": healthz_port,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{d / 'containerd.sock'}",
        "resolvConf": str(d / "resolv.conf"), "failSwapOn": False,
        "podLogsDir": str(d / "pod-logs"), "volumePluginDir": str(d / "volume-plugins"),
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False, "maxPods": 50,
        "registerWithTaints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "syncFrequency": "10s", "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s", "shutdownGracePeriodCriticalPods": "0s",
        "logging": {"verbosity": 1},
    }


def kube_proxy_config(kubeconfig: Path, healthz_port: int, metrics_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME, "bindAddress": NODE_IP, "clusterCIDR": POD_CIDR,
        "nodePortAddresses": [f"{NODE_IP}/32"],
        "healthzBindAddress": f"127.0.0.1:{healthz_port}", "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "logging": {"verbosity": 1},
    }


def node_labels() -> dict[str, str]:
    return {NODE_KIND_LABEL: "real", "nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": str(GPUS),
            "nvidia.com/gpu.product": "fake-on-cpu"}


# -- the node ----------------------------------------------------------------------------------------
def image_targets(listing: str) -> dict[str, str]:
    """`ctr images ls` output (a header, then REF TYPE DIGEST ...) as ref -> manifest digest."""
    targets: dict[str, str] = {}
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            targets[fields[0]] = fields[2]
    return targets


def stale_refs(listing: str, keep: str) -> list[str]:
    """From `ctr images ls` output: the other tags of `keep`'s repository, and the CRI's image-id
    refs (`sha256:<config digest>`, which the CRI adds for every image it sees) that no remaining
    tag shares a manifest with. Without the latter an old server image's layers (GBs) stay
    referenced after its tag goes, and the node's persistent store grows with every source change."""
    targets = image_targets(listing)
    repository = keep.rpartition(":")[0]
    old = [r for r in targets if r.rpartition(":")[0] == repository and r != keep]
    kept = {targets[r] for r in targets if r not in old and not r.startswith("sha256:")}
    return old + [r for r in targets if r.startswith("sha256:") and targets[r] not in kept]


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
            node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json", timeout=10).stdout)
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
                if _pid_alive(data.get("pid")) or (prev is not None and prev.alive()):
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

    def _remove_stale_pods(self) -> None:
        """containerd's root persists: drop sandboxes/containers a crashed earlier node left in it."""
        if self.crictl("pods", "-q").stdout.strip():
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
            node = json.loads(cluster.kubectl("get", "node", NODE_NAME, "-o", "json", timeout=10).stdout)
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


