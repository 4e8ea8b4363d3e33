"""A real Kubernetes control plane on 127.0.0.1, for the e2e tests and the demo.

etcd -> kube-apiserver -> kube-controller-manager + kube-scheduler -> kwok (fake GPU nodes,
pods that "run" without containers) -> the metric chain users run (Prometheus -> prometheus-adapter
-> APIService, metrics_chain.py). Nothing is mocked inside Kubernetes: Deployments create
ReplicaSets and Pods, the scheduler binds them to the fake nodes by their `nvidia.com/gpu`
capacity, the HPA controller scales on what Prometheus scraped. Only the node agent (kwok instead
of a kubelet) and the GPU itself (fake_dcgm_exporter.py serves the DCGM series a test sets) stand
in for hardware, and kwok's pods get fake 10.x addresses that nothing ever connects to.

Three ways in: the `cluster` pytest fixture (tests/e2e/conftest.py), `make cluster-up` /
`make cluster-down` (python -m localcluster), and this context manager:

    with LocalCluster() as cluster:
        cluster.kubectl("get", "nodes")
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO

import yaml

from localcluster import controlplane, kwok, metrics_chain
from localcluster.apireader import ApiReader
from localcluster.component import Component
from localcluster.kubectl import KubectlCommands
from localcluster.nodeconfig import NODE_USERS
from localcluster.pki import Pki, make_pki
from localcluster.ports import free_port
from localcluster.realnode import (RealNode, RealNodeError, RealNodeInUse, disabled_by_env, missing_prerequisites,
                                    node_binaries_dir)
from localcluster.versions import built_dir

REPO = Path(__file__).resolve().parents[1]
BUILD_SCRIPT = REPO / "localcluster" / "build-binaries.sh"
# Users in the static token file. All are cluster admins except where a test narrows them with a
# ServiceAccount token; separate names let the audit log attribute every write.
USERS = ("causalflow-admin", "causalflow-operator", "system:kube-controller-manager",
         "system:kube-scheduler", "kwok-controller", "causalflow-metrics-adapter", "causalflow-prometheus",
         "causalflow-dcgm-exporter", *NODE_USERS)


class ClusterError(RuntimeError):
    """The control plane could not be started; the message names the component and its log."""


def binaries_dir(build: bool = True) -> Path:
    """The cached binaries' directory, building them first (minutes, once) when missing."""
    return built_dir(BUILD_SCRIPT, build)


class LocalCluster(KubectlCommands):
    """Starts and stops the control plane; see the module docstring."""

    external = False

    def __init__(self, workdir: Path | None = None, bin_dir: Path | None = None, quiet: bool = True,
                 real_node: bool | None = None, metric_chain: bool = True) -> None:
        """`real_node`: None starts the real node when this machine can run it (else says why on
        stderr), True requires it, False leaves it out; CAUSALFLOW_REAL_NODE=0 means False.
        `metric_chain=False` leaves out Prometheus, prometheus-adapter and the custom metrics API
        (no HPA can read a metric then): for a cluster that autoscales nothing, such as the demo's,
        which then needs neither their build nor their start."""
        self.bin_dir = bin_dir or binaries_dir()
        self.metric_chain = metric_chain
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="causalflow-cluster-"))
        self.quiet = quiet
        self.components: dict[str, Component] = {}
        self.tokens = {user: secrets.token_hex(16) for user in USERS}
        self.ports: dict[str, int] = {}
        self.pki: Pki | None = None
        self.started_seconds: float | None = None
        self._real_node_required = bool(real_node)
        self.real_node, self.real_node_skipped = self._real_node(real_node)

    def _real_node(self, wanted: bool | None) -> tuple[RealNode | None, str | None]:
        """The RealNode to start, or None and the reason (printed when it was not asked for off)."""
        if wanted is False or (wanted is None and disabled_by_env()):
            return None, "disabled (real_node=False or CAUSALFLOW_REAL_NODE=0)"
        try:
            node_bin = node_binaries_dir()
            missing = missing_prerequisites(node_bin)
        except (subprocess.CalledProcessError, OSError) as e:
            missing = [f"building the node binaries failed: {e}"]
        if not missing:
            node = RealNode(self.workdir, node_bin)
            try:
                node.claim()
                return node, None
            except RealNodeInUse as e:
                missing = [str(e)]
        reason = "; ".join(missing)
        if wanted:
            raise ClusterError(f"real node requested but this machine cannot run it: {reason}")
        print(f"local cluster: no real node ({reason}); kwok nodes only. "
              "CAUSALFLOW_REAL_NODE=0 silences this.", file=sys.stderr)
        return None, reason

    # -- paths a user of the cluster needs ---------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def operator_kubeconfig(self) -> Path:
        """Kubeconfig of the user `causalflow-operator`, so the audit log can single it out."""
        return self.workdir / "operator.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def kube_cache(self) -> Path:
        """kubectl's discovery and HTTP caches (KUBECACHEDIR): in the workdir, removed with it. Under
        ~/.kube/cache each cluster, on a port of its own, left tens of MB behind for good."""
        return self.workdir / "kube-cache"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["KUBECACHEDIR"] = str(self.kube_cache)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    @property
    def pids(self) -> dict[str, int]:
        return {name: c.pid for name, c in self.components.items() if c.pid is not None}

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        t0 = time.monotonic()
        stale_node = RealNode.from_state(self.workdir)
        if stale_node is not None:  # a crashed earlier run in this work dir: undo what it changed
            stale_node.cleanup()
        for stale in ("etcd", "logs", "pki", "realnode"):  # every start is a fresh, empty cluster
            shutil.rmtree(self.workdir / stale, ignore_errors=True)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            self.pki = make_pki(self.workdir / "pki")
            for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler",
                         "kwok", *metrics_chain.COMPONENTS):
                self.ports[name] = free_port()
            self._write_static_files()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfigs()
            self._start_controllers()
            self._start_kwok()
            self._create_nodes()
            if self.real_node is not None:
                try:
                    self.real_node.start(self)
                except RealNodeInUse as e:  # another cluster took it since __init__ looked
                    if self._real_node_required:
                        raise
                    print(f"local cluster: no real node ({e}); kwok nodes only.", file=sys.stderr)
                    self.real_node, self.real_node_skipped = None, str(e)
            if self.metric_chain:
                metrics_chain.start(self)
            self._wait_for_nodes_ready()
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - t0
        self.save_state()
        return self

    def add_real_node(self) -> RealNode | None:
        """Start the real node on this running cluster, if it has none yet and the machine can run it
        (None, with `real_node_skipped` saying why, when it cannot).

        The e2e tier starts its clusters without the node and adds it here when a real-node test
        first needs it: two test workers each run a cluster, and only the one that runs real-node
        tests claims the machine's one real-node slot."""
        if self.real_node is None:
            self.real_node, self.real_node_skipped = self._real_node(None)
            if self.real_node is not None:
                try:
                    self.real_node.start(self)
                except RealNodeInUse as e:
                    self.real_node, self.real_node_skipped = None, str(e)
                self.save_state()
        return self.real_node

    def stop(self) -> None:
        """Stops the real node (its pods first, then everything it changed on the machine), then
        every other component (reverse start order) by PID, and removes the work dir."""
        try:
            if self.real_node is not None:
                self.real_node.stop(self)
        finally:
            for comp in reversed(list(self.components.values())):
                comp.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def start_metric_chain(self) -> bool:
        """Start the metric chain (metrics_chain.py) on a cluster running without it; False, doing
        nothing, where it runs already. With `stop_metric_chain` a cluster runs it only while a test
        needs it: idle, it costs about 7 % of a core."""
        if self.metric_chain:
            return False
        metrics_chain.start(self)
        self.metric_chain = True
        self.save_state()
        return True

    def stop_metric_chain(self) -> None:
        """Stop what `start_metric_chain` started: the custom metrics API goes, then its processes."""
        metrics_chain.stop(self)
        self.metric_chain = False
        self.save_state()

    def restart_apiserver(self) -> None:
        """Kill and restart kube-apiserver with the same flags (a fault the operator must survive)."""
        comp = self.components["apiserver"]
        comp.stop()
        comp.start()
        self.wait_ready("apiserver", self._apiserver_ready, 60)

    # -- state for `make cluster-up` / `make cluster-down` -----------------------------------
    def save_state(self) -> None:
        state = {"workdir": str(self.workdir), "bin_dir": str(self.bin_dir), "ports": self.ports,
                 "pids": self.pids, "argv": {n: c.argv for n, c in self.components.items()},
                 "tokens": self.tokens, "metric_chain": self.metric_chain}
        (self.workdir / "state.json").write_text(json.dumps(state, indent=2))

    @classmethod
    def attach(cls, workdir: Path) -> LocalCluster:
        """Re-open a cluster started by another process (`make cluster-up`) to use or stop it."""
        state = json.loads((Path(workdir) / "state.json").read_text())
        self = cls.__new__(cls)
        self.bin_dir, self.workdir = Path(state["bin_dir"]), Path(state["workdir"])
        self._own_workdir, self.quiet, self.started_seconds = True, True, None
        self.ports, self.tokens, self.pki = state["ports"], state["tokens"], None
        self.metric_chain = state.get("metric_chain", True)
        self.real_node, self.real_node_skipped = RealNode.from_state(self.workdir), None
        self._real_node_required = False
        self.components = {}
        for name, pid in state["pids"].items():
            comp = Component(name, state["argv"][name], self.workdir / "logs" / f"{name}.log", pid=pid)
            self.components[name] = comp
        return self

    # -- conveniences for tests ---------------------------------------------------------------
    def _need_metric_chain(self) -> None:
        if not self.metric_chain:
            raise ClusterError("this cluster runs without its metric chain (LocalCluster(metric_chain=False)): "
                               "no Prometheus to query, no DCGM exporter to set")

    def _node(self) -> RealNode:
        if self.real_node is None:
            raise RealNodeError(f"this cluster has no real node: {self.real_node_skipped or 'not started'}")
        return self.real_node

    def import_image(self, archive: Path | IO[bytes], ref: str | None = None) -> None:
        """Import a docker-archive/oci-archive (a file, or a pipe such as `Images.stream`) into the
        real node's containerd (k8s.io namespace); with `ref`, the older tags of its repository go
        (RealNode.import_image)."""
        self._node().import_image(archive if not isinstance(archive, (str, Path)) else Path(archive), ref)

    def has_image(self, ref: str) -> bool:
        """Whether the real node's containerd holds image `ref` (pods can use it without a pull)."""
        return self._node().has_image(ref)

    def content_digests(self) -> set[str]:
        """The blobs the real node's containerd holds (`Images.import_into` sends only the others)."""
        return self._node().content_digests()

    def set_metric(self, namespace: str, metric: str, value: float | None, pod: str | None = None) -> None:
        """Sets a DCGM GPU metric (DCGM_FI_*) at the fake DCGM exporter, for every GPU pod in
        `namespace` or for one `pod` (None clears it); the HPA reads it through Prometheus and
        prometheus-adapter a scrape and an adapter query later (metrics_chain.py)."""
        self._need_metric_chain()
        metrics_chain.set_dcgm_metric(self, namespace, metric, value, pod)

    def prometheus_query(self, promql: str) -> list[dict]:
        """An instant query against the cluster's Prometheus: the result vector."""
        self._need_metric_chain()
        return metrics_chain.query(self, promql)

    def get_object(self, kind: str, name: str, namespace: str | None = None) -> dict | None:
        return self._reader().get(kind, name, namespace)

    def list_objects(self, kind: str, namespace: str | None = None, selector: str | None = None,
                     fields: str | None = None) -> list[dict]:
        return self._reader().list(kind, namespace, selector, fields)

    def _reader(self) -> ApiReader:
        """Reads on a kept-alive connection as the admin user (localcluster/apireader.py): what
        tests poll, without a kubectl process each time."""
        key = (self.server, self.tokens["causalflow-admin"])
        if getattr(self, "_reader_key", None) != key:
            self._api_reader = ApiReader(*key, str(self.workdir / "pki" / "ca.crt"))
            self._reader_key = key
        return self._api_reader

    def api_get(self, path: str, token_user: str = "causalflow-admin") -> dict:
        """GET a path from the API server (what `kubectl get --raw` does)."""
        req = urllib.request.Request(self.server + path,
                                     headers={"Authorization": f"Bearer {self.tokens[token_user]}"})
        with urllib.request.urlopen(req, context=self._ssl(), timeout=10) as resp:
            return json.load(resp)

    # -- internals ----------------------------------------------------------------------------
    def _ssl(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.workdir / "pki" / "ca.crt"))

    def _log(self, msg: str) -> None:
        if not self.quiet:
            print(f"  cluster: {msg}", flush=True)

    def start_component(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Component:
        """Start one process of the cluster, logged to logs/<name>.log and stopped with the cluster."""
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log", env=env)
        self.components[name] = comp
        comp.start()
        self.save_state()  # `make cluster-down` finds every started process even if start-up dies
        return comp

    def wait_ready(self, name: str, probe, timeout: float) -> None:
        """Poll `probe` until it is true; fail with the component's last log lines if it exits or times out."""
        comp = self.components.get(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if comp is not None and not comp.alive():
                raise ClusterError(f"{name} exited during start-up; last log lines:\n{comp.tail()}")
            try:
                if probe():
                    self._log(f"{name} ready")
                    return
            except (OSError, urllib.error.URLError, ValueError, subprocess.SubprocessError):
                pass
            time.sleep(0.2)
        tail = comp.tail() if comp else ""
        raise ClusterError(f"{name} not ready after {timeout:.0f}s; last log lines:\n{tail}")

    def _write_static_files(self) -> None:
        w = self.workdir
        (w / "tokens.csv").write_text("".join(
            f'{tok},{user},{user},"system:masters"\n' for user, tok in self.tokens.items()))
        (w / "audit-policy.yaml").write_text(yaml.safe_dump(controlplane.audit_policy()))
        stages = kwok.stages(self.bin_dir.parent / "kwok-stages")
        (w / "kwok.yaml").write_text(yaml.safe_dump_all(stages, sort_keys=False))

    def _start_etcd(self) -> None:
        p = self.ports["etcd"]
        self.start_component("etcd", controlplane.etcd_argv(self.bin_dir, self.workdir, self.ports))

        def healthy() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{p}/health", timeout=2) as r:
                return json.load(r).get("health") == "true"

        self.wait_ready("etcd", healthy, 30)

    def _apiserver_ready(self) -> bool:
        req = urllib.request.Request(self.server + "/readyz",
                                     headers={"Authorization": f"Bearer {self.tokens['causalflow-admin']}"})
        with urllib.request.urlopen(req, context=self._ssl(), timeout=3) as r:
            return r.status == 200

    def _start_apiserver(self) -> None:
        self.start_component("apiserver", controlplane.apiserver_argv(self.bin_dir, self.workdir, self.ports, self.audit_log))
        self.wait_ready("apiserver", self._apiserver_ready, 90)

    def kubeconfig_for(self, user: str) -> str:
        """A kubeconfig (YAML text) for one of the cluster's token users."""
        return controlplane.kubeconfig(self.server, (self.workdir / "pki" / "ca.crt").read_bytes(), user, self.tokens[user])

    def _write_kubeconfigs(self) -> None:
        self.kubeconfig.write_text(self.kubeconfig_for("causalflow-admin"))
        self.operator_kubeconfig.write_text(self.kubeconfig_for("causalflow-operator"))
        for user, fname in (("system:kube-controller-manager", "controller-manager"),
                            ("system:kube-scheduler", "scheduler"), ("kwok-controller", "kwok"),
                            ("causalflow-metrics-adapter", "metrics")):
            (self.workdir / f"{fname}.kubeconfig").write_text(self.kubeconfig_for(user))
        for f in self.workdir.glob("*.kubeconfig"):
            f.chmod(0o600)

    def _start_controllers(self) -> None:
        self.start_component("controller-manager", controlplane.controller_manager_argv(self.bin_dir, self.workdir, self.ports))
        self.start_component("scheduler", controlplane.scheduler_argv(self.bin_dir, self.workdir, self.ports))

        def healthz(port: int) -> bool:
            ctx = ssl._create_unverified_context()  # self-signed serving certs of local components
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=2) as r:
                return r.status == 200

        self.wait_ready("controller-manager", lambda: healthz(self.ports["controller-manager"]), 60)
        self.wait_ready("scheduler", lambda: healthz(self.ports["scheduler"]), 60)

    def _start_kwok(self) -> None:
        self.start_component("kwok", controlplane.kwok_argv(self.bin_dir, self.workdir, self.ports))

        def healthz() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports['kwok']}/healthz", timeout=2) as r:
                return r.status == 200

        self.wait_ready("kwok", healthz, 30)

    def _create_nodes(self) -> None:
        self.apply(kwok.node_manifests())

    def _wait_for_nodes_ready(self) -> None:
        def ready() -> bool:
            items = self.api_get("/api/v1/nodes")["items"]
            expected = len(kwok.kwok_nodes()) + (self.real_node is not None)
            return len(items) == expected and all(
                any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
                for n in items)

        self.wait_ready("nodes", ready, 60)
