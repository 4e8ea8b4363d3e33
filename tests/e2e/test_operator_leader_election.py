"""Two operator replicas against a real API server: one Lease, one leader, one writer.

Each test runs two `python -m ocr_operator --leader-elect` processes (the fixture's OperatorProcess,
identities op-a_* and op-b_* from POD_NAME) watching the test's namespace, with the Lease in that
namespace. Short timings keep the tests short; the takeover bounds are stated in them.
"""

from __future__ import annotations

import time
import urllib.request
from datetime import datetime, timezone

import pytest
from kubernetes import client

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from tests.e2e.operator_fixtures import ocrservice, operator_kubeconfig

LEASE = "ocr-operator"
# Short, but with client-go's proportions: the renew deadline leaves a leader time to stop before
# a standby may take over (lease duration), and several retries within it.
FAST = {"lease_duration": 5, "renew_deadline": 4.0, "retry_period": 0.5}


@pytest.fixture
def replicas(cluster, namespace, ocr_crd, tmp_path, request):
    """start(name, **timings) -> a started operator with leader election; all stopped at the end."""
    started: list[OperatorProcess] = []
    failed_before = request.session.testsfailed

    def start(name: str, lease_duration: int, renew_deadline: float, retry_period: float) -> OperatorProcess:
        env = {"POD_NAME": name, "OCR_OPERATOR_LEADER_ELECT": "true",
               "OCR_OPERATOR_LEADER_ELECT_NAMESPACE": namespace, "OCR_OPERATOR_LEADER_ELECT_NAME": LEASE,
               "OCR_OPERATOR_LEADER_ELECT_LEASE_DURATION": str(lease_duration),
               "OCR_OPERATOR_LEADER_ELECT_RENEW_DEADLINE": str(renew_deadline),
               "OCR_OPERATOR_LEADER_ELECT_RETRY_PERIOD": str(retry_period)}
        op = OperatorProcess(operator_kubeconfig(cluster), [namespace], tmp_path / f"{name}.log", extra_env=env)
        started.append(op)
        return op.start()  # up when /healthz answers: the standby's, or kopf's once leading

    yield start
    for op in started:
        op.stop()
    if request.session.testsfailed > failed_before:
        for op in started:
            print(f"\n----- {op.log_path.name} -----\n{op.log_tail(60)}")


def lease(kube, namespace: str) -> client.V1LeaseSpec | None:
    try:
        return client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, namespace).spec
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def held_by(kube, namespace: str, name: str) -> client.V1LeaseSpec | None:
    spec = lease(kube, namespace)
    return spec if spec is not None and (spec.holder_identity or "").startswith(f"{name}_") else None


def take_lease(kube, namespace: str, holder: str, duration: int, attempts: int = 20) -> None:
    """Write another holder into the Lease as a contender would: read, replace, and on a 409 (the
    leader renewed in between, every retry period) read again; `attempts` bounds the loop."""
    api = client.CoordinationV1Api(kube)
    for attempt in range(attempts):
        current = api.read_namespaced_lease(LEASE, namespace)
        current.spec.holder_identity = holder
        current.spec.lease_duration_seconds = duration
        current.spec.renew_time = datetime.now(timezone.utc)
        try:
            api.replace_namespaced_lease(LEASE, namespace, current)
            return
        except client.ApiException as exc:
            if exc.status != 409 or attempt == attempts - 1:
                raise


def metric(op: OperatorProcess, name: str) -> float:
    """The sum of a metric's samples on the operator's /metrics (0 when it has none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def leader_and_standby(start, kube, namespace: str, **timings) -> tuple[OperatorProcess, OperatorProcess]:
    a = start("op-a", **timings)
    wait_for(lambda: held_by(kube, namespace, "op-a"), timeout=30, interval=0.2, message="op-a holding the Lease")
    b = start("op-b", **timings)
    assert b.probe()["leader"] is False  # the standby's own /healthz
    return a, b


def deployment_replicas(ocr, name: str) -> int | None:
    deploy = ocr.get("deploy", name)
    return deploy["spec"]["replicas"] if deploy else None


def test_of_two_replicas_only_the_lease_holder_reconciles(cluster, namespace, ocr, kube, replicas):
    a, b = leader_and_standby(replicas, kube, namespace, **FAST)
    ocr.apply(ocrservice("web", replicas=1))
    wait_for(lambda: deployment_replicas(ocr, "web") == 1, timeout=60, message="Deployment web from the leader")
    time.sleep(2 * FAST["retry_period"] + 1)  # the standby has had several turns to (wrongly) act
    assert held_by(kube, namespace, "op-a"), lease(kube, namespace)
    standby = b.probe()  # its own /healthz: it knows who leads, and nothing failed
    assert (standby["leader"], standby["holder"], standby["error"]) == (False, lease(kube, namespace).holder_identity, None)
    # The standby started no controller: not one reconcile, not one request from one.
    assert metric(b, "ocr_operator_reconciles_total") == 0
    assert metric(b, "ocr_operator_api_requests_total") == 0
    assert metric(a, "ocr_operator_reconciles_total") > 0
    assert "acquired lease" not in b.log_text()


def test_a_killed_leaders_standby_takes_over_once_the_lease_expires_and_reconciles(cluster, namespace, ocr, kube,
                                                                                     replicas):
    a, b = leader_and_standby(replicas, kube, namespace, **FAST)
    ocr.apply(ocrservice("web", replicas=1))
    wait_for(lambda: deployment_replicas(ocr, "web") == 1, timeout=60, message="Deployment web from op-a")

    killed = datetime.now(timezone.utc)
    a.kill()  # SIGKILL: no release; op-b must wait for the lease to expire
    last = lease(kube, namespace)  # op-a's last renewal (op-b cannot have taken over yet)
    assert last.holder_identity.startswith("op-a_")
    ocr.patch("ocrs", "web", {"spec": {"replicas": 2}})  # made while nobody leads
    spec = wait_for(lambda: held_by(kube, namespace, "op-b"), timeout=FAST["lease_duration"] + 15, interval=0.2,
                    message="op-b holding the Lease")
    took = (spec.acquire_time - killed).total_seconds()
    after_renewal = (spec.acquire_time - last.renew_time).total_seconds()
    print(f"\nSIGKILL of the leader -> standby holds the Lease after {took:.1f}s, {after_renewal:.1f}s after "
          f"the last renewal (lease {FAST['lease_duration']}s, retry {FAST['retry_period']}s)")
    # Not before the lease expired (a full duration after the last renewal: op-b saw that record
    # only after it was written), and within the lease duration plus a candidate's longest wait
    # (2.2 retry periods) and a margin.
    assert after_renewal >= FAST["lease_duration"], after_renewal
    assert took <= FAST["lease_duration"] + 5, took
    assert spec.lease_transitions == last.lease_transitions + 1
    wait_for(lambda: deployment_replicas(ocr, "web") == 2, timeout=60,
             message="the change made after the kill reconciled by op-b")
    # Counted when the reconcile finishes, after its status write: a moment after the Deployment changed.
    wait_for(lambda: metric(b, "ocr_operator_reconciles_total") > 0, timeout=10, interval=0.2,
             message="op-b's finished reconcile on its /metrics")


def test_a_gracefully_stopped_leader_releases_and_its_standby_takes_over_at_once(cluster, namespace, ocr, kube,
                                                                                  replicas):
    # A long lease: without the release the standby would wait 30 s.
    a, b = leader_and_standby(replicas, kube, namespace, lease_duration=30, renew_deadline=10.0, retry_period=0.5)
    stopped = datetime.now(timezone.utc)
    a.stop(timeout=20)  # SIGTERM: kopf stops, then the Lease is released
    assert a.proc.returncode == 0, a.log_tail()
    assert "released lease" in a.log_text()
    spec = wait_for(lambda: held_by(kube, namespace, "op-b"), timeout=15, interval=0.2, message="op-b holding the Lease")
    took = (spec.acquire_time - stopped).total_seconds()
    print(f"\nSIGTERM of the leader -> standby holds the Lease after {took:.1f}s (lease 30s)")
    assert took < 10, took
    ocr.apply(ocrservice("web", replicas=1))
    wait_for(lambda: deployment_replicas(ocr, "web") == 1, timeout=60, message="Deployment web from op-b")


def test_a_leader_that_cannot_renew_exits_at_once(cluster, namespace, ocr, kube, replicas):
    a = replicas("op-a", **FAST)
    wait_for(lambda: held_by(kube, namespace, "op-a"), timeout=30, interval=0.2, message="op-a holding the Lease")
    # Someone else's record, as if op-a's renewals had failed and another replica had taken over.
    take_lease(kube, namespace, "intruder_00000000", duration=60)
    taken = time.monotonic()
    wait_for(lambda: not a.alive(), timeout=FAST["renew_deadline"] + 10, interval=0.2,
             message="op-a exiting after its renew deadline")
    gone = time.monotonic() - taken
    print(f"\nlease taken from the leader -> it exited after {gone:.1f}s (renew deadline {FAST['renew_deadline']}s)")
    assert a.proc.returncode == 1
    assert "lost" in a.log_text()
    assert gone <= FAST["renew_deadline"] + FAST["retry_period"] + 3, gone
    assert lease(kube, namespace).holder_identity == "intruder_00000000"  # and it did not release someone else's
