"""Every pod we create is admitted under the Pod Security Standards' "restricted" level.

The namespace is labelled `pod-security.kubernetes.io/enforce=restricted`; the API server's
built-in PodSecurity admission then refuses, at creation, any pod outside the profile: a
ReplicaSet reports it as ReplicaFailure/FailedCreate. kwok's nodes are enough, since admission
happens before scheduling: the pods only have to be created.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import yaml

from localcluster.waiting import wait_for
from tests.e2e.test_chart import CHART, helm

ROOT = Path(__file__).resolve().parents[2]
RESTRICTED = ("pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")


def restrict(cluster, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, *RESTRICTED, "--overwrite")


def admitted_pods(cluster, namespace: str, deployment: str) -> list[dict]:
    """The Deployment's pods once all of its desired replicas exist; fails at once, with the
    API server's reason, when its ReplicaSet could not create one."""
    def created():
        deploy = cluster.get_object("deploy", deployment, namespace)
        selector = ",".join(f"{k}={v}" for k, v in deploy["spec"]["selector"]["matchLabels"].items())
        for rs in cluster.list_objects("rs", namespace, selector):
            for c in rs.get("status", {}).get("conditions", []):
                if c["type"] == "ReplicaFailure":
                    return ("refused", f"{rs['metadata']['name']}: {c.get('reason')}: {c.get('message')}")
        pods = cluster.list_objects("pods", namespace, selector)
        want = deploy["spec"]["replicas"]
        return ("created", pods) if want > 0 and len(pods) >= want else None

    outcome, detail = wait_for(created, timeout=90, message=f"the pods of Deployment {deployment} in {namespace}")
    assert outcome == "created", detail
    return detail


def failed_creates(cluster, namespace: str) -> list[str]:
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
    return [e.get("message", "") for e in events if e.get("reason") == "FailedCreate"]


def test_a_restricted_namespace_refuses_a_pod_outside_the_profile(cluster, namespace):
    """The control: the namespace's label is enforced here, so the admissions below mean something."""
    restrict(cluster, namespace)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": namespace},
           "spec": {"containers": [{"name": "c", "image": "registry.invalid/plain:1"}]}}
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump(pod), check=False)
    assert proc.returncode != 0 and 'violates PodSecurity "restricted' in proc.stderr, proc.stderr


def test_the_server_pods_of_the_production_example_are_admitted_in_a_restricted_namespace(cluster, namespace, ocr_operator, ocr):
    restrict(cluster, namespace)
    [manifest] = [d for d in yaml.safe_load_all((ROOT / "examples" / "production.yaml").read_text()) if d]
    manifest["metadata"]["namespace"] = namespace
    ocr.apply(manifest)
    name = manifest["metadata"]["name"]
    wait_for(lambda: ocr.get("deploy", name), timeout=60, message=f"the operator's Deployment {name}")
    pods = admitted_pods(cluster, namespace, name)
    assert all(p["spec"]["securityContext"]["runAsUser"] == 10001 for p in pods)
    assert failed_creates(cluster, namespace) == []


def test_the_charts_operator_and_helm_test_pods_are_admitted_in_a_restricted_namespace(cluster, namespace, ocr_crd):
    restrict(cluster, namespace)
    release = f"psa-{uuid.uuid4().hex[:5]}"
    try:
        helm(cluster, "install", release, str(CHART), "-n", namespace, "--set", "crds.install=false",
             "--wait", "--timeout", "90s")
        pods = admitted_pods(cluster, namespace, f"{release}-causalflow-ocr")
        assert [p["spec"]["containers"][0]["name"] for p in pods] == ["operator"]
        # The `helm test` pod (kwok cannot run its script, so it is created, not run by `helm test`).
        rendered = helm(cluster, "template", release, str(CHART), "-n", namespace, "--show-only",
                        "templates/tests/test-operator.yaml").stdout
        [test_pod] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "Pod"]
        proc = cluster.kubectl("create", "-f", "-", input=yaml.safe_dump(test_pod), check=False)
        assert proc.returncode == 0, proc.stderr
        assert failed_creates(cluster, namespace) == []
    finally:
        helm(cluster, "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s", check=False)
