"""Fixtures that run the real operator (`python -m ocr_operator`) as a process against the cluster.

- `ocr_crd` (session): crds/ (the OcrService CRD and its replicas admission policy) applied with
  server-side apply, the CRD Established.
- `ocr_operator` (function): the operator watching only the test's namespace, up when kopf's
  liveness endpoint answers; its log goes to a file that is printed when the test fails; it is
  stopped by PID. `OperatorProcess.kill()` / `.start()` let a test crash and restart it.
- `ocr_helpers`: small helpers the operator tests share (get objects, conditions, audit log).

Exposed to the e2e tier by one import line at the bottom of tests/e2e/conftest.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import uuid
from datetime import datetime
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from localcluster import metrics_chain
from localcluster.operator_process import CRD_FILE, CRDS, FIELD_MANAGER, OPERATOR_USER, OperatorProcess  # noqa: F401
from localcluster.waiting import wait_for


def print_operator_log(op: OperatorProcess, lines: int = 150) -> None:
    """The operator log's tail, where pytest shows a failing test's output."""
    print(f"\n----- operator log ({op.log_path}) -----\n{op.log_tail(lines)}\n----- end of operator log -----")


@contextlib.contextmanager
def operator_log_if_the_test_fails(request, op: OperatorProcess, lines: int = 150) -> Iterator[None]:
    """Around a test (an autouse fixture's yield): the operator log when the test failed. In the
    test's own body its failure is not counted yet: there an `except` prints it (print_operator_log)."""
    failed_before = request.session.testsfailed
    yield
    if request.session.testsfailed > failed_before:
        print_operator_log(op, lines)
        print_pods_and_events(op)
        print_nodes(request.getfixturevalue("cluster"))


def print_pods_and_events(op: OperatorProcess, lines: int = 40) -> None:
    """The pods and Events of the operator's namespaces, as its own identity lists them (the chart's
    rules allow both): why a revision's pod never got Ready (Pending, a failed mount, a crash) is
    there, and in no log the harness keeps after the run."""
    for namespace in op.namespaces or ():
        for args in (["get", "pods", "-o", "wide"], ["get", "events", "--sort-by=.lastTimestamp"]):
            r = subprocess.run(["kubectl", "--kubeconfig", str(op.kubeconfig), "-n", namespace, *args],
                               capture_output=True, text=True, timeout=30, check=False)
            print_tail(f"kubectl -n {namespace} {' '.join(args)}", r, lines)


def print_tail(title: str, r: subprocess.CompletedProcess[str], lines: int) -> None:
    """A kubectl run's last `lines` lines of output and errors, under a header naming it."""
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-lines:])
    print(f"----- {title} -----\n{tail}")


def node_lines(nodes: list[dict]) -> list[str]:
    """Each node's taints and the conditions not in their healthy state (Ready True, the pressures
    False), with when they turned: a pod Unschedulable for "untolerated taint(s)" names no taint."""
    lines = []
    for node in nodes:
        taints = [f"{t['key']}:{t['effect']}" for t in (node.get("spec") or {}).get("taints") or ()]
        off = [f"{c['type']}={c['status']} since {c.get('lastTransitionTime')} ({c.get('reason')}: {c.get('message')})"
               for c in (node.get("status") or {}).get("conditions") or ()
               if c["status"] != ("True" if c["type"] == "Ready" else "False")]
        lines.append(f"{node['metadata']['name']}: taints {taints}; conditions off: {off or 'none'}")
    return lines


def print_nodes(cluster, lines: int = 40) -> None:
    """The nodes' taints and conditions, and the Events about nodes (DiskPressure, NotReady), as the
    admin sees them: what held a pod off the real node."""
    r = cluster.kubectl("get", "nodes", "-o", "json", check=False, timeout=30)
    listing = node_lines(json.loads(r.stdout)["items"]) if r.returncode == 0 else [r.stderr.strip()]
    print("----- nodes -----\n" + "\n".join(listing))
    r = cluster.kubectl("get", "events", "-n", "default", "--field-selector=involvedObject.kind=Node",
                        "--sort-by=.lastTimestamp", check=False, timeout=30)
    print_tail("kubectl -n default get events (nodes)", r, lines)


@pytest.fixture(scope="session")
def ocr_crd(cluster):
    """The OcrService CRD, installed (or updated) on the cluster and Established, with the
    admission policy shipped beside it (crds/: the whole folder, as the README installs it)."""
    return install_crds(cluster)


def install_crds(cluster) -> Path:
    """What `ocr_crd` does, for any cluster (a test's `private_cluster` too)."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=causalflow-tests",
                    "-f", str(CRDS))
    # Not `kubectl wait`: it fails at once ("status.conditions accessor error") when it looks before
    # the API server has written the new CRD's first conditions.
    wait_for(lambda: "True" in cluster.kubectl("get", "crd", "ocrservices.ocr.causalflow.dev", "-o",
                                               'jsonpath={.status.conditions[?(@.type=="Established")].status}',
                                               check=False).stdout, timeout=60, message="OcrService CRD Established")
    wait_for(lambda: cluster.kubectl("get", "ocrs", "-A", check=False).returncode == 0, timeout=30,
             message="ocrs served")
    return CRD_FILE


def operator_kubeconfig(cluster) -> Path:
    path = getattr(cluster, "operator_kubeconfig", None)
    return Path(path) if path and Path(path).exists() else Path(cluster.kubeconfig)


@contextlib.contextmanager
def operator_namespace(cluster, prefix: str, log: Path,
                       extra_env: dict[str, str] | None = None) -> Iterator[tuple[str, OperatorProcess]]:
    """A fresh namespace `<prefix>-<5 hex>` with its default ServiceAccount, and an operator process
    watching only it (not started: the caller starts it when its set-up is ready); the operator is
    stopped and the namespace deleted (without waiting) at the end (module-scoped real-node
    fixtures, and `private_operator`)."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", namespace)
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], log, extra_env=extra_env)
    try:
        cluster.wait_default_serviceaccount(namespace)
        yield namespace, op
    finally:
        op.stop()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@contextlib.contextmanager
def private_operator(cluster, prefix: str, log: Path,
                     extra_env: dict[str, str] | None = None) -> Iterator[tuple[OcrHelpers, OperatorProcess]]:
    """What `ocr_crd`, `namespace`, `ocr` and `ocr_operator` give a test, on `cluster` (a
    `private_cluster`): the CRDs, a fresh namespace's helpers and a started operator for it, whose
    log is printed when the block fails."""
    install_crds(cluster)
    with operator_namespace(cluster, prefix, log, extra_env) as (namespace, op):
        op.start()
        try:
            yield OcrHelpers(cluster, namespace), op
        except BaseException:
            print_operator_log(op)
            raise


@pytest.fixture
def ocr_operator(cluster, namespace, ocr_crd, tmp_path, request):
    """The operator, watching only this test's namespace; log printed if the test fails."""
    op = OperatorProcess(operator_kubeconfig(cluster), [namespace], tmp_path / "operator.log")
    op.start()
    target = f"ocr-operator-{namespace}"
    if not cluster.external:  # the local cluster's Prometheus scrapes it like the chart's ServiceMonitor would
        metrics_chain.add_scrape_target(cluster, target, f"127.0.0.1:{op.metrics_port}",
                                        {"job": "ocr-operator", "namespace": namespace})
    try:
        with operator_log_if_the_test_fails(request, op, lines=200):
            yield op
    finally:
        if not cluster.external:
            metrics_chain.remove_scrape_target(cluster, target)
        op.stop()


class OcrHelpers:
    """Reads and changes the tests share, in the test's namespace: changes through kubectl, reads
    through the cluster's get_object/list_objects (kubectl on an external cluster; the local one
    reads over a kept-alive connection, as tests poll them every half second)."""

    def __init__(self, cluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace

    def apply(self, manifest: dict) -> None:
        # JSON, not PyYAML's YAML 1.1: a string such as "8e123456" goes out unquoted there, and
        # kubectl's YAML reads it back as a number (a random env value failed the API's schema).
        self.cluster.kubectl("apply", "-n", self.ns, "-f", "-", input=json.dumps(manifest))

    def get(self, kind: str, name: str) -> dict | None:
        return self.cluster.get_object(kind, name, self.ns)

    def list(self, kind: str, selector: str | None = None) -> list[dict]:
        return self.cluster.list_objects(kind, self.ns, selector)

    def patch(self, kind: str, name: str, patch: dict, type_: str = "merge") -> None:
        self.cluster.kubectl("patch", kind, name, "-n", self.ns, "--type", type_, "-p", json.dumps(patch))

    def delete(self, kind: str, name: str, wait: bool = False) -> None:
        self.cluster.kubectl("delete", kind, name, "-n", self.ns, f"--wait={str(wait).lower()}")

    @staticmethod
    def condition(obj: dict | None, type_: str) -> dict:
        return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})

    def ready(self, name: str) -> dict | None:
        """The OcrService once Ready=True for its current generation, else None."""
        obj = self.get("ocrs", name)
        c = self.condition(obj, "Ready")
        gen = obj["metadata"]["generation"] if obj else None
        if c.get("status") == "True" and obj["status"].get("observedGeneration") == gen and c.get("observedGeneration") == gen:
            return obj
        return None

    def wait_ready(self, name: str, timeout: float = 90) -> dict:
        return wait_for(lambda: self.ready(name), timeout=timeout,
                        message=f"OcrService {name} Ready=True with observedGeneration == generation")

    def events(self, name: str) -> list[dict]:
        items = self.list("events")
        return [e for e in items if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "OcrService"]

    def audit_writes(self, since: float, user: str = OPERATOR_USER) -> list[dict]:
        """Mutating requests by `user` on objects in the test's namespace, in the API server's audit
        log after `since` (epoch seconds). The namespace: the session's cluster is shared with
        other workers' tests, whose operators run as the same user."""
        log = getattr(self.cluster, "audit_log", None)
        if not log or not Path(log).exists():
            pytest.skip("no audit log (external cluster)")
        out = []
        mine = f'"namespace":"{self.ns}"'  # a cheap first cut: the log holds every worker's writes
        for line in Path(log).read_text(errors="replace").splitlines():
            if mine not in line:
                continue
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("stage") != "ResponseComplete" or ev.get("verb") not in ("create", "update", "patch", "delete"):
                continue
            if ev.get("user", {}).get("username") != user and not str(ev.get("userAgent", "")).startswith(FIELD_MANAGER):
                continue
            if ev.get("objectRef", {}).get("namespace") != self.ns:
                continue
            stamp = ev.get("requestReceivedTimestamp", "")
            when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0
            if when >= since:
                out.append(ev)
        return out


@pytest.fixture
def ocr(cluster, namespace):
    return OcrHelpers(cluster, namespace)


def ocrservice(name: str, **spec) -> dict:
    """An OcrService manifest with fast health-check settings for kwok pods."""
    base = {
        "image": "registry.invalid/causalflow/ocr-server:1.0",
        "resources": {"gpus": 1, "cpu": "100m", "memory": "256Mi"},
        "rollout": {"healthCheck": {"periodSeconds": 1, "failureThreshold": 2}, "modelLoadTimeoutSeconds": 10,
                    "progressDeadlineSeconds": 30, "settleSeconds": 2, "unschedulableGraceSeconds": 5},
        "terminationGracePeriodSeconds": 0,
    }
    for key, value in spec.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            base[key] = {**base[key], **value}
        else:
            base[key] = value
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "metadata": {"name": name}, "spec": base}


def prometheus_operator_crd(kind: str) -> dict:
    """prometheus-operator's CRD for `kind` (ServiceMonitor, PrometheusRule): upstream's group,
    version and names, schema left open. The tests check that the operator creates the object once
    the API serves it, not prometheus-operator's schema."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
                 "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }


def install_crd(cluster, crd: dict, timeout: float = 60) -> None:
    """Apply `crd` and wait until it is Established. (`kubectl wait --for=condition=Established`
    fails at once on a CRD whose status has no conditions yet, right after it is created.)"""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(crd))
    name = crd["metadata"]["name"]
    wait_for(lambda: "True" in cluster.kubectl(
        "get", "crd", name, "-o", 'jsonpath={.status.conditions[?(@.type=="Established")].status}',
        check=False).stdout, timeout=timeout, message=f"{name} Established")


@contextlib.contextmanager
def optional_child_service(cluster, log_dir: Path, kind: str, field: str) -> Iterator[tuple[OcrHelpers, OperatorProcess]]:
    """On `cluster`, a `private_cluster` (the CRD installed and deleted here would reach the
    operators of every test on a shared cluster): `private_operator` (optional APIs re-checked every
    second; the resync stays 300 s) and OcrService `web`, Ready, with `spec.monitoring.<field>`
    enabled (label release=prom). Where prometheus-operator's `kind` CRD was missing, the toggle must
    be a no-op (not Degraded) and the CRD is then installed, and deleted afterwards (the operator
    stopped first). Yields the namespace's helpers and the operator."""
    crd = prometheus_operator_crd(kind)
    name = crd["metadata"]["name"]
    had_crd = cluster.kubectl("get", "crd", name, check=False).returncode == 0
    with private_operator(cluster, "monitoring", log_dir / "operator.log",
                          {"OCR_OPERATOR_DISCOVERY_SECONDS": "1"}) as (ocr, op):
        try:
            ocr.apply(ocrservice("web", replicas=1, monitoring={field: {"enabled": True, "labels": {"release": "prom"}}}))
            obj = ocr.wait_ready("web")
            if not had_crd:
                assert ocr.condition(obj, "Degraded")["status"] == "False"
                install_crd(cluster, crd)
            yield ocr, op
        finally:
            op.stop()
            if not had_crd:
                cluster.kubectl("delete", "crd", name, "--wait=false", check=False)
