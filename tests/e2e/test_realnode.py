"""The real node (`real-node-0`: containerd + runc + kubelet + kube-proxy) runs real containers.

Every test here uses the REAL node: its pods select `causalflow.dev/node-kind=real` and tolerate
the node's taint. The image is the harness's own `causalflow-nodetest` (a static Go binary built
from localcluster/nodeimages, imported into containerd; no registry). Traffic goes only to
loopback, the node IP and the node's pod/Service addresses, all on this harness's own bridges.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest
import yaml

from localcluster import machine
from localcluster.nodeconfig import (EVICTION_HARD, EVICTION_PRESSURE_PERIOD, FIREWALL_CHAIN, GPU_RESOURCE, GPUS, NODE_IP,
                                     NODE_KIND_LABEL, NODE_NAME, NODE_SELECTOR, POD_CIDR, TAINT_KEY, TOLERATION,
                                     image_targets)
from localcluster.realnode import RealNode
from localcluster.versions import K8S_VERSION
from localcluster.waiting import wait_for

# The last two tests stop, kill and restart the node's processes: marked `exclusive`, they run
# while no other worker's test does (tests/e2e/conftest.py), the others beside them.
pytestmark = [pytest.mark.realnode]


@pytest.fixture(scope="module")
def node(real_node) -> RealNode:
    return real_node


def pod_spec(image: str, args: list[str], **extra) -> dict:
    container = {"name": "main", "image": image, "imagePullPolicy": "Never", "args": args,
                 **extra.pop("container", {})}
    return {"nodeSelector": dict(NODE_SELECTOR), "tolerations": [dict(TOLERATION)],
            "terminationGracePeriodSeconds": 1, "containers": [container], **extra}


def serving_container() -> dict:
    return {"ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}}}


def apply(cluster, namespace: str, manifest: dict) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(manifest))


def get(cluster, namespace: str, kind: str, name: str) -> dict:
    return cluster.require_object(kind, name, namespace)


def pods(cluster, namespace: str, selector: str) -> list[dict]:
    return cluster.list_objects("pods", namespace, selector)


def is_ready(obj: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def http_get(url: str, timeout: float = 3) -> str:
    # No proxy: the machine's proxy settings must not route a pod address anywhere else.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=timeout) as resp:
        return resp.read().decode().strip()


def test_real_node_is_ready_labelled_tainted_and_advertises_gpus(cluster, node):
    real = get(cluster, "default", "node", NODE_NAME)
    assert is_ready(real)
    assert real["metadata"]["labels"][NODE_KIND_LABEL] == "real"
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in real["spec"]["taints"]
    assert real["status"]["allocatable"][GPU_RESOURCE] == str(GPUS)
    assert {"type": "InternalIP", "address": NODE_IP} in real["status"]["addresses"]
    info = real["status"]["nodeInfo"]
    assert info["kubeletVersion"] == K8S_VERSION
    assert info["containerRuntimeVersion"] == "containerd://2.4.2"
    drop = subprocess.run(["iptables", "-S", FIREWALL_CHAIN], capture_output=True, text=True).stdout
    assert f"-A {FIREWALL_CHAIN} -i cfo-pods ! -o cfo-pods -j DROP" in drop  # no pod packet leaves the machine
    kwok = json.loads(cluster.kubectl("get", "nodes", "-l", f"{NODE_KIND_LABEL}=kwok", "-o", "json").stdout)["items"]
    assert kwok and all(n["metadata"]["annotations"].get("kwok.x-k8s.io/node") == "fake" for n in kwok)
    if node.ready_seconds is not None:  # None where another worker started the node
        print(f"\nreal node Ready {node.ready_seconds:.1f}s after its start")


def test_the_running_kubelet_evicts_on_absolute_thresholds_and_clears_pressure_in_seconds(cluster, node):
    """The kubelet took the harness's eviction settings (its /configz, through the API server's node
    proxy): a percentage of the machine's shared disk once held the node tainted DiskPressure for
    5 minutes (localcluster/nodeconfig.py)."""
    live = json.loads(cluster.kubectl("get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/configz").stdout)["kubeletconfig"]
    assert live["evictionHard"] == EVICTION_HARD
    assert live["evictionPressureTransitionPeriod"] == EVICTION_PRESSURE_PERIOD
    conditions = {c["type"]: c["status"] for c in get(cluster, "default", "node", NODE_NAME)["status"]["conditions"]}
    assert conditions["DiskPressure"] == conditions["MemoryPressure"] == "False", conditions


def test_pod_runs_with_a_real_ip_passes_its_probe_and_serves_logs_and_exec(cluster, node, namespace):
    t0 = time.monotonic()
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {"app": "web"}},
                               "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())})
    pod = wait_for(lambda: (p := get(cluster, namespace, "pod", "web")) and is_ready(p) and p,
                   timeout=60, message="pod web Ready (its HTTP readiness probe passed)")
    print(f"\npod created -> Ready: {time.monotonic() - t0:.1f}s")
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert ipaddress.ip_address(pod["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
    assert http_get(f"http://{pod['status']['podIP']}:8080/") == "web"  # the container's hostname
    logs = cluster.kubectl("logs", "web", "-n", namespace).stdout
    assert "causalflow-nodetest: serving on :8080 as web" in logs
    out = cluster.kubectl("exec", "web", "-n", namespace, "--", "/causalflow-nodetest", "echo", "hello", "from", "exec")
    assert out.stdout.strip() == "hello from exec"
    # No cluster DNS and never the machine's resolver: the pod's resolv.conf names no nameserver.
    resolv = cluster.kubectl("exec", "web", "-n", namespace, "--", "/causalflow-nodetest", "cat", "/etc/resolv.conf")
    assert "nameserver" not in resolv.stdout


def test_pod_reaches_the_api_server_through_the_kubernetes_service_with_its_token(cluster, node, namespace):
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
                               "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())})
    wait_for(lambda: is_ready(get(cluster, namespace, "pod", "client")), timeout=60, message="pod Ready")
    ip = get(cluster, "default", "service", "kubernetes")["spec"]["clusterIP"]

    def fetch(path: str) -> list[str]:
        out = cluster.kubectl("exec", "client", "-n", namespace, "--", "/causalflow-nodetest", "get",
                              f"https://{ip}:443{path}", check=False)
        return out.stdout.split("\n", 1) if out.returncode == 0 else [out.stderr]

    status, body = wait_for(lambda: (r := fetch("/version"))[0] == "200" and r, timeout=30,
                            message=f"GET https://{ip}/version from the pod (TLS verified with its CA)")
    assert json.loads(body)["gitVersion"] == K8S_VERSION
    # Authenticated as its ServiceAccount, which may not list nodes: a 403 naming it, not a 401.
    status, body = fetch("/api/v1/nodes")
    assert status == "403" and f"system:serviceaccount:{namespace}:default" in body


def test_cluster_ip_service_routes_from_the_host_to_both_pods(cluster, node, namespace):
    labels = {"app": "svc"}
    apply(cluster, namespace, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "svc"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())}}})
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc"},
                               "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]}})
    wait_for(lambda: len([p for p in pods(cluster, namespace, "app=svc") if is_ready(p)]) == 2, timeout=60,
             message="2 Ready pods")
    names = {p["metadata"]["name"] for p in pods(cluster, namespace, "app=svc")}
    ip = get(cluster, namespace, "service", "svc")["spec"]["clusterIP"]
    seen: set[str] = set()

    def both_answered() -> bool:
        try:
            seen.add(http_get(f"http://{ip}/"))
        except OSError:
            return False  # kube-proxy has not written the rules yet
        return seen >= names

    wait_for(both_answered, timeout=60, interval=0.1, message=f"both pods answer through ClusterIP {ip}")
    assert seen == names


def test_container_over_its_memory_limit_is_reported_oomkilled(cluster, node, namespace):
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "oom"},
                               "spec": pod_spec(node.test_image, ["oom"], restartPolicy="Never",
                                                container={"resources": {"limits": {"memory": "32Mi"}}})})
    state = wait_for(lambda: (s := (get(cluster, namespace, "pod", "oom")["status"].get("containerStatuses")
                                    or [{}])[0].get("state", {})).get("terminated") and s,
                     timeout=60, message="container terminated")
    assert state["terminated"]["reason"] == "OOMKilled"
    assert state["terminated"]["exitCode"] == 137
    wait_for(lambda: get(cluster, namespace, "pod", "oom")["status"]["phase"] == "Failed", timeout=30,
             message="pod phase Failed (restartPolicy Never)")


def test_crashing_container_is_restarted_and_its_previous_logs_kept(cluster, node, namespace):
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crash"},
                               "spec": pod_spec(node.test_image, ["crash", "3"])})

    def status() -> dict:
        return (get(cluster, namespace, "pod", "crash")["status"].get("containerStatuses") or [{}])[0]

    st = wait_for(lambda: (s := status()).get("restartCount", 0) >= 1 and s.get("lastState", {}).get("terminated") and s,
                  timeout=60, message="a restart after the crash")
    assert st["lastState"]["terminated"]["exitCode"] == 3
    assert st["lastState"]["terminated"]["reason"] == "Error"
    # The kubelet answers `--previous` from its cached pod status; when the container has crashed
    # again meanwhile, that status can still name the container its garbage collector has just
    # removed (it keeps one dead container per container name), and the kubelet answers "unable to
    # retrieve container logs". Asking again reads the newer status: the previous logs are kept.
    wait_for(lambda: "crashing with exit code 3" in cluster.kubectl("logs", "crash", "-n", namespace,
                                                                    "--previous").stdout,
             timeout=30, interval=1, message="the previous container's logs")
    wait_for(lambda: status().get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff",
             timeout=60, message="CrashLoopBackOff")


def test_gpu_deployment_lands_on_the_real_node_and_untolerating_pods_do_not(cluster, node, namespace):
    labels = {"app": "gpu"}
    spec = pod_spec(node.test_image, ["serve", "8080"], container=serving_container())
    spec["containers"][0]["resources"]["limits"][GPU_RESOURCE] = "1"
    apply(cluster, namespace, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gpu"},
                               "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                                        "template": {"metadata": {"labels": labels}, "spec": spec}}})
    pod = wait_for(lambda: next((p for p in pods(cluster, namespace, "app=gpu") if is_ready(p)), None),
                   timeout=60, message="the GPU pod Ready")
    assert pod["spec"]["nodeName"] == NODE_NAME
    assert pod["spec"]["containers"][0]["resources"]["requests"][GPU_RESOURCE] == "1"
    # Without the toleration a GPU pod goes to a kwok node, never to the real one.
    plain = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "plain"},
             "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "plain"}}, "template": {
                 "metadata": {"labels": {"app": "plain"}},
                 "spec": {"containers": [{"name": "main", "image": "registry.invalid/x:1",
                                          "resources": {"limits": {GPU_RESOURCE: "1"}}}]}}}}
    apply(cluster, namespace, plain)
    placed = wait_for(lambda: (ps := pods(cluster, namespace, "app=plain")) and len(ps) == 3 and
                      all(p["spec"].get("nodeName") for p in ps) and ps, timeout=60, message="3 pods scheduled")
    assert {p["spec"]["nodeName"] for p in placed} <= {"gpu-node-0", "gpu-node-1"}


def _sockets(pid: int, established: bool) -> set[str]:
    args = ["ss", "-H", "-tnp", "state", "established"] if established else ["ss", "-H", "-ltnp"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    # Column 3 is the local address when listening, the peer's with a state filter (no State column).
    return {line.split()[3].rsplit(":", 1)[0].strip("[]") for line in out.splitlines() if f"pid={pid}," in line}


def test_node_components_listen_and_connect_only_on_loopback_and_the_harness_bridges(cluster, node, namespace):
    """The loopback-only rule of the control plane, widened by exactly the node IP and pod range."""
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed"},
                               "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())})
    wait_for(lambda: is_ready(get(cluster, namespace, "pod", "probed")), timeout=60, message="pod Ready")
    cluster.kubectl("logs", "probed", "-n", namespace)  # the API server -> kubelet connection

    def allowed(addr: str) -> bool:
        if addr in ("127.0.0.1", "::1", "::ffff:127.0.0.1", NODE_IP, "*", "0.0.0.0", "::"):
            return addr not in ("*", "0.0.0.0", "::")
        try:
            return ipaddress.ip_address(addr) in ipaddress.ip_network(POD_CIDR)
        except ValueError:
            return False

    listening = {n: _sockets(cluster.pids[n], False) for n in ("kubelet", "containerd", "kube-proxy")}
    assert NODE_IP in listening["kubelet"], listening
    connected = {n: _sockets(pid, True) for n, pid in cluster.pids.items()}
    for name, addrs in {**{f"{k} (listen)": v for k, v in listening.items()}, **connected}.items():
        assert all(allowed(a) for a in addrs), f"{name}: {addrs}"


def _restart(cluster, node: RealNode) -> None:
    node.start(cluster)
    cluster.save_state()
    wait_for(lambda: is_ready(get(cluster, "default", "node", NODE_NAME)), timeout=90, message="real node Ready again")


def test_importing_a_new_tag_removes_the_older_tags_of_its_repository_only(node, tmp_path):
    """The image store persists across clusters; the harness's content-tagged images would pile
    up in it (GBs each for the server) without this."""
    from localcluster.nodeimage import docker_archive

    binary = node.bin_dir / "causalflow-nodetest"
    repo, other = "localhost/causalflow/prune-test", "localhost/causalflow/prune-test-other"
    try:
        for ref in (f"{repo}:one", f"{other}:one"):
            node.import_image(docker_archive(ref, binary, ["/causalflow-nodetest"], tmp_path / "a.tar"))
        node.import_image(docker_archive(f"{repo}:two", binary, ["/causalflow-nodetest"], tmp_path / "b.tar"), f"{repo}:two")
        refs = node.ctr("images", "ls", "-q").stdout.split()
        assert f"{repo}:two" in refs and f"{repo}:one" not in refs
        assert f"{other}:one" in refs  # another repository, even one whose name starts the same, stays
        # The CRI's image-id refs (sha256:<config>) point only at manifests a tag still has.
        targets = image_targets(node.ctr("images", "ls").stdout)
        tagged = {t for r, t in targets.items() if not r.startswith("sha256:")}
        assert {r for r, t in targets.items() if r.startswith("sha256:") and t not in tagged} == set()
    finally:
        node.ctr("images", "rm", f"{repo}:one", f"{repo}:two", f"{other}:one", check=False)


def test_an_image_sharing_the_nodes_layers_is_imported_as_its_new_layers_and_runs(cluster, node, namespace,
                                                                                    product_images, tmp_path):
    """`Images.import_into` sends only the layers the node lacks (localcluster/imagestream.py):
    the operator image plus one small layer arrives as that layer, and a pod runs it."""
    from localcluster import imagebuild as img
    from localcluster.buildah import Buildah, state_dir

    base = product_images.on_node("operator")
    b = Buildah(state_dir())
    ref = f"localhost/causalflow/thin-import-test:{os.getpid()}"
    marker = f"only the new layer travelled {time.time()}"
    (tmp_path / "marker").write_text(marker)
    with img._locked(b.state):  # no ensure_images() clears working containers meanwhile
        work = b.run("from", "--pull-never", base).strip()
        try:
            b.run("copy", work, str(tmp_path / "marker"), "/marker")
            b.run("commit", "--format", "docker", work, ref)
        finally:
            subprocess.run(b.argv("rm", work), capture_output=True, env=b.env)
    lines: list[str] = []
    try:
        img.Images(server=None, server_tiny=None, operator=ref, archive_dir=b.state / "archives",
                   log=lines.append).import_into(cluster, ref)
        thin = [line for line in lines if "OCI archive of its new layers" in line]
        assert thin and " 0 MiB sent" in thin[0], lines
        apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "thin"},
                                   "spec": pod_spec(ref, [], restartPolicy="Never",
                                                    container={"command": ["cat", "/marker"]})})
        wait_for(lambda: get(cluster, namespace, "pod", "thin")["status"].get("phase") in ("Succeeded", "Failed"),
                 timeout=90, message="pod thin finished")
        assert get(cluster, namespace, "pod", "thin")["status"]["phase"] == "Succeeded"
        assert cluster.kubectl("logs", "thin", "-n", namespace).stdout.strip() == marker
    finally:
        cluster.kubectl("delete", "pod", "thin", "-n", namespace, "--wait=true", "--ignore-not-found", check=False)
        node.remove_other_tags("localhost/causalflow/thin-import-test:-")  # the test's tag and its image id
        subprocess.run(b.argv("rmi", ref), capture_output=True, env=b.env)


@pytest.mark.exclusive
def test_stop_leaves_nothing_behind_then_the_node_starts_again(cluster, node, namespace):
    """Stop with a running pod (sandbox, netns, veth, rootfs, cgroups, a Service's iptables rules):
    afterwards the machine matches the snapshot taken before the node started."""
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "left", "labels": {"app": "left"}},
                               "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())})
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "left"},
                               "spec": {"selector": {"app": "left"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    wait_for(lambda: is_ready(get(cluster, namespace, "pod", "left")), timeout=60, message="pod Ready")
    pids = [cluster.pids[n] for n in ("containerd", "kubelet", "kube-proxy")]
    # The snapshot sees the running node's footprint, so an empty diff after stop means something.
    before = machine.from_json(json.loads((node.dir / "baseline.json").read_text()))
    during = machine.leftovers(before, machine.snapshot(node.mount_roots))
    assert {"mounts", "links", "routes", "iptables", "cgroups", "sysctls", "processes"} <= during.keys(), during
    assert any("(nsfs)" in m for m in during["mounts"]) and "+ cfo-pods" in during["links"]
    assert any("KUBE-SERVICES" in r for r in during["iptables"])
    print(f"\nfootprint while running: { {k: len(v) for k, v in during.items()} }")
    t0 = time.monotonic()
    node.stop(cluster)
    print(f"\nreal node stop: {time.monotonic() - t0:.1f}s")
    try:
        assert node.last_leftovers == {}, node.last_leftovers
        # Gone (a zombie counts: the worker that started the node, maybe another one, reaps it).
        assert not any(machine.pid_alive(p) for p in pids)
        assert not machine.processes_under(str(node.dir))
        again = node.cleanup()  # idempotent: nothing left to undo
        assert all(done == [] for done in again.values()), again
    finally:
        _restart(cluster, node)


@pytest.mark.exclusive
def test_cleanup_after_a_killed_node_leaves_nothing_behind(cluster, node, namespace):
    """What `make cluster-down` does after a crashed harness: every node process SIGKILLed with a pod
    running, then the cleanup from the state recorded in the work dir."""
    apply(cluster, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan"},
                               "spec": pod_spec(node.test_image, ["serve", "8080"], container=serving_container())})
    wait_for(lambda: is_ready(get(cluster, namespace, "pod", "orphan")), timeout=60, message="pod Ready")
    shims = machine.processes_under(str(node.dir), ("containerd-shim-runc-v2",))
    assert shims, "a running pod has a shim"
    sandboxes = set(node.crictl("pods", "-q").stdout.split())
    assert sandboxes
    for name in ("apiserver-relay", "kube-proxy", "kubelet", "containerd"):
        comp = cluster.components.pop(name)
        os.kill(comp.pid, signal.SIGKILL)
        comp.stop()  # only reaps it: it is dead already
    try:
        recorded = RealNode.from_state(cluster.workdir)
        recorded.cleanup()
        assert recorded.leftovers() == {}
    finally:
        cluster.kubectl("delete", "node", NODE_NAME, "--wait=false", check=False)
        _restart(cluster, node)
    # containerd's image store persists, and with it the killed node's sandboxes: the restart removed them.
    assert not sandboxes & set(node.crictl("pods", "-q").stdout.split())
