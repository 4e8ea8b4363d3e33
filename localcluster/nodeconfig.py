"""What the real node's components are told: names, addresses and ranges, and the configs of
containerd, the CNI plugins, kubelet and kube-proxy (pure: localcluster/realnode.py writes and runs them).

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
  DNS query leaves the machine. `failSwapOn: false`, image GC off (images are imported, never
  pulled back), `podLogsDir`, `volumePluginDir` in the work dir.
- eviction thresholds in bytes and inodes, not percent, and `evictionPressureTransitionPeriod`
  15 s: the node shares the machine's disk, whose free space moves with everything else on it (a
  270 GB disk with 8 GB free to root, seen down to 287 MB). At 1 % (2.7 GB there) a test writing an
  image or a model took the node into DiskPressure, and kubelet's default period (5 min) kept it
  tainted `node.kubernetes.io/disk-pressure` that long: the next module's pods sat Unschedulable
  for 4.5 minutes. Below these thresholds the machine is full anyway.
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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

NODE_NAME = "real-node-0"
NODE_KIND_LABEL = "causalflow.dev/node-kind"
TAINT_KEY = "causalflow.dev/real-node"
TOLERATION = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
NODE_SELECTOR = {NODE_KIND_LABEL: "real"}
GPU_RESOURCE = "nvidia.com/gpu"
GPUS = 8  # two test workers run real-node tests side by side on it (tests/e2e/conftest.py)
NODE_BRIDGE, POD_BRIDGE = "cfo-node", "cfo-pods"
# Absolute, small: the node's share of a disk and memory that the whole machine uses (see above).
EVICTION_HARD = {"memory.available": "100Mi", "nodefs.available": "256Mi",
                 "imagefs.available": "256Mi", "nodefs.inodesFree": "10000"}
EVICTION_PRESSURE_PERIOD = "15s"
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
        "evictionHard": dict(EVICTION_HARD), "evictionPressureTransitionPeriod": EVICTION_PRESSURE_PERIOD,
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
