"""Fixtures for the e2e tier: one real control plane per session, one namespace per test.

By default the session starts the harness's LocalCluster (`localcluster/`: etcd, kube-apiserver,
controllers, scheduler, kwok GPU nodes, Prometheus + prometheus-adapter behind the custom-metrics
APIService) on 127.0.0.1; the real kubelet node `real-node-0` joins it when the first test marked `realnode` runs, where this machine can run it
(those tests select it by label and toleration, every other pod stays on the kwok nodes). In a run
with xdist workers, every worker that runs e2e tests uses one such cluster (`cluster`); a test
that restarts the API server or acts on every namespace takes a cluster of its own
(`private_cluster`). With
`CAUSALFLOW_E2E_CLUSTER=external` the same tests run against the cluster `KUBECONFIG` names
(kind, for example); tests that need the harness' own parts (the settable DCGM exporter, the audit
log, kwok's failure stages, restarting the API server) are skipped there with that reason.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from localcluster.cluster import LocalCluster
from localcluster.external import ExternalCluster, NotInExternalCluster
from localcluster.operator_process import REPO, OperatorProcess
from localcluster.sharing import ClusterShare, refresh
from tests import zygote
from tests.conftest import SHARED_CLUSTER_ENV

pytestmark = pytest.mark.e2e


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


class ExternalTestCluster(ExternalCluster):
    """The external cluster, where a part only the local harness has skips the test with its reason."""

    def set_metric(self, *args, **kwargs) -> None:
        try:
            super().set_metric(*args, **kwargs)
        except NotInExternalCluster as missing:
            pytest.skip(str(missing))

    def restart_apiserver(self) -> None:
        try:
            super().restart_apiserver()
        except NotInExternalCluster as missing:
            pytest.skip(str(missing))


def require_local(cluster) -> None:
    """Skip (with the reason) a test that needs a part only the local harness has."""
    if cluster.external:
        pytest.skip("needs the local harness (kwok stages, its settable DCGM exporter and Prometheus, or audit log)")


def _started(workdir: Path | None = None, metric_chain: bool = True) -> LocalCluster:
    local = LocalCluster(workdir=workdir, real_node=False, metric_chain=metric_chain)
    local.start()
    print(f"\nlocal control plane started in {local.started_seconds:.1f}s at {local.server}")
    return local


def e2e_kinds(items: list[pytest.Item]) -> tuple[bool, bool]:
    """Whether the session's e2e tests (marked so by `pytest_collection_modifyitems`) include
    (real-node tests, kwok tests). Every xdist worker collects the whole session, so each one that
    opens the shared cluster decides alike."""
    realnode = [item.get_closest_marker("realnode") is not None for item in items
                if item.get_closest_marker("e2e") is not None]
    return any(realnode), not all(realnode)


@pytest.fixture(scope="session")
def cluster(request):
    """The session's cluster: the one KUBECONFIG names (CAUSALFLOW_E2E_CLUSTER=external); in a run
    with workers, one cluster every e2e worker shares (started by the first to need it, with the
    real node where the session has real-node tests; localcluster/sharing.py); else a LocalCluster
    of this process's own, which the real node joins when a real-node test first asks for it."""
    if os.environ.get("CAUSALFLOW_E2E_CLUSTER") == "external":
        kubeconfig = os.environ.get("KUBECONFIG")
        if not kubeconfig:
            pytest.exit("CAUSALFLOW_E2E_CLUSTER=external needs KUBECONFIG", returncode=2)
        yield ExternalTestCluster(Path(kubeconfig))
        return
    shared = os.environ.get(SHARED_CLUSTER_ENV)
    if shared:
        share = ClusterShare(Path(shared))
        realnode, kwok = e2e_kinds(request.session.items)

        def start(workdir: Path) -> LocalCluster:
            # The metric chain only where kwok tests come (several of their modules read metrics):
            # for the real-node tests alone, one module of twenty uses it (`metric_chain`), and
            # idle it cost about 7 % of a core for the whole run.
            local = _started(workdir, metric_chain=kwok)
            if realnode:  # the node joins at once: a process that added it later would own it
                local.add_real_node()
            return local

        local = share.open(start, LocalCluster.attach)
        local.share = share
        try:
            yield local
        finally:
            share.close(stop=lambda: (refresh(local), local.stop()))
        return
    local = _started()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def private_cluster(request):
    """A cluster of the module's own, without the metric chain (as `make demo` starts it): for the
    tests that restart its API server or run an operator that acts on every namespace, which the
    session's cluster, shared with other workers' tests, must not see. On an external cluster,
    that cluster."""
    if os.environ.get("CAUSALFLOW_E2E_CLUSTER") == "external":
        yield request.getfixturevalue("cluster")
        return
    local = _started(metric_chain=False)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module", autouse=True)
def _cluster_turn(request):
    """A real-node module on a shared cluster holds it for its whole run, beside the other worker's
    modules; from its first test marked `exclusive` (one that stops, kills or restarts node
    processes: they come last in their module) to its end it holds the cluster alone
    (`_exclusive_turn`). The module then records what it changed of the node's processes. The
    kwok tests take no turn: they never use the node, and what would disturb the other workers'
    tests (an API server restart, an operator of every namespace) runs on a `private_cluster`."""
    if request.node.get_closest_marker("realnode") is None:
        yield None
        return
    local = request.getfixturevalue("cluster")
    share = getattr(local, "share", None)
    if share is None:
        yield None
        return
    with share.turn() as turn:
        try:
            yield turn
        finally:
            if turn.exclusive:
                local.save_state()


@pytest.fixture(autouse=True)
def _exclusive_turn(request, _cluster_turn):
    """A test marked `exclusive` first waits for the other worker's module to end (new ones queue
    behind it), then reads back what that worker recorded of the node's processes."""
    if _cluster_turn is not None and not _cluster_turn.exclusive \
            and request.node.get_closest_marker("exclusive") is not None:
        _cluster_turn.take_alone()
        refresh(request.getfixturevalue("cluster"))
    yield


@pytest.fixture(autouse=True)
def _real_node_for_realnode_tests(request):
    """Every test marked `realnode` runs with the real node started (or is skipped saying why)."""
    if request.node.get_closest_marker("realnode"):
        request.getfixturevalue("real_node")


@pytest.fixture(scope="module")
def metric_chain(cluster):
    """The cluster's metric chain (Prometheus, prometheus-adapter, the fake DCGM exporter) for a
    module's tests: started for them where the cluster runs without it (the shared cluster of a run
    with real-node tests only), and stopped after them again."""
    started = not cluster.external and cluster.start_metric_chain()
    try:
        yield cluster
    finally:
        if started:
            cluster.stop_metric_chain()


@pytest.fixture(scope="session")
def kube(cluster):
    """A `kubernetes` client ApiClient for the cluster (admin user)."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    yield api
    api.close()


@pytest.fixture(scope="session", autouse=True)
def _operators_forked():
    """The tests' `python -m ocr_operator` processes are forked from a process that has imported
    kopf and the clients (tests/zygote.py): about 1.4 of a start's 1.9 CPU s, some 90 starts a
    run. CAUSALFLOW_TEST_FORK=0 execs each afresh."""
    if not zygote.enabled():
        yield
        return

    def launch(args: list[str], env: dict[str, str], log: Path):
        parent = zygote.Zygote.get(REPO, "ocr_operator")
        return parent.fork(env, REPO, log, args) if parent.compatible(env) else None

    OperatorProcess.launcher = launch
    yield
    OperatorProcess.launcher = None


@pytest.fixture
def namespace(cluster, kube, request):
    """A fresh namespace for one test, deleted afterwards without waiting. Through the session's API
    client: a test's own steps go through kubectl, this plumbing need not (two kubectl processes a
    test, some 200 a run, were 11 CPU s)."""
    from kubernetes import client

    name = f"t-{request.node.name[:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": name}})
    cluster.wait_default_serviceaccount(name)
    yield name
    try:
        core.delete_namespace(name)
    except Exception:  # noqa: BLE001 - best effort: the test deleted it, or left the API server stopped
        pass
from tests.e2e.operator_fixtures import ocr, ocr_crd, ocr_operator  # noqa: E402,F401  (operator e2e fixtures)
from tests.e2e.realnode_fixtures import model_pvc, product_images, real_node, tiny_model_volume  # noqa: E402,F401  (real-node product fixtures)
