"""The Helm chart on a real API server: install, RBAC that is enough, upgrade and uninstall.

The chart's operator Deployment is "run" by kwok (no container), so the operator itself runs as a
local process authenticated with a token of the chart's ServiceAccount, watching what the chart's
Deployment tells it to watch: whatever the chart's RBAC does not allow fails exactly as it would
in a pod, and a namespace the chart does not name is not reconciled.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Callable

import pytest
import yaml

from localcluster.operator_process import OperatorProcess
from localcluster.waiting import wait_for
from tests.e2e.operator_fixtures import install_crd, prometheus_operator_crd

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "causalflow-ocr"
CRD_FILE = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
CRD_NAME = "ocrservices.ocr.causalflow.dev"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


# --------------------------------------------------------------------------- helpers

def helm(cluster, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("helm", path=cluster.env.get("PATH"))
    assert exe, "helm not found: `make cluster-binaries` builds it next to kubectl"
    proc = subprocess.run([exe, *args], capture_output=True, text=True, env=cluster.env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def kjson(cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def crd(cluster) -> dict | None:
    proc = cluster.kubectl("get", "crd", CRD_NAME, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def ensure_crd(cluster) -> None:
    """Other tests share the session's cluster and may have applied crds/ with kubectl."""
    if crd(cluster) is None:
        cluster.kubectl("apply", "--server-side", "-f", str(CRD_FILE.parent))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", f"crd/{CRD_NAME}")


POLICY_NAME = "ocrservices-replicas.ocr.causalflow.dev"
BATCH_CRD_NAME = "ocrbatches.ocr.causalflow.dev"  # the chart's second CRD, applied from crds/ with the first
API_OBJECTS = (("crd", CRD_NAME), ("crd", BATCH_CRD_NAME), ("validatingadmissionpolicy", POLICY_NAME),
               ("validatingadmissionpolicybinding", POLICY_NAME))


def adopt_crd(cluster, release: str, namespace: str) -> None:
    """Let a release own the existing CRD and its admission policy (the README's adoption recipe)."""
    for kind, name in API_OBJECTS:
        if cluster.kubectl("get", kind, name, check=False).returncode != 0:
            continue
        cluster.kubectl("label", kind, name, "app.kubernetes.io/managed-by=Helm", "--overwrite")
        cluster.kubectl("annotate", kind, name, f"meta.helm.sh/release-name={release}",
                        f"meta.helm.sh/release-namespace={namespace}", "--overwrite")


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def create_namespace(cluster, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    cluster.wait_default_serviceaccount(name)
    return name


def service_account_kubeconfig(cluster, namespace: str, sa: str, path: Path) -> str:
    """A kubeconfig that authenticates as the ServiceAccount (a bound token, like a pod's)."""
    token = cluster.kubectl("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    admin["users"] = [{"name": sa, "user": {"token": token}}]
    for ctx in admin["contexts"]:
        ctx["context"]["user"] = sa
    path.write_text(yaml.safe_dump(admin))
    path.chmod(0o600)
    return token


def ocrservice(name: str, namespace: str, **spec) -> dict:
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": "registry.example.com/causalflow/ocr-server:0.1.0",
                     "rollout": {"settleSeconds": 1}, **spec}}


def watched_namespaces(deployment: dict) -> list[str] | None:
    """What the chart's operator Deployment tells the operator to watch: its namespaces, or None
    for --all-namespaces."""
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    if "--all-namespaces" in args:
        return None
    namespaces = [a.split("=", 1)[1] for a in args if a.startswith("--namespace=")]
    assert namespaces, f"the Deployment names no scope: {args}"
    return namespaces


def leader_election_args(deployment: dict) -> list[str]:
    """The chart Deployment's leader-election flags (the Lease's namespace is the pod's: POD_NAMESPACE)."""
    return [a for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--leader-elect")]


@contextlib.contextmanager
def chart_operator(cluster, name: str, ns: str, tmp: Path, *values: str, prepare: Callable[[], None] | None = None,
                   env: dict[str, str] | None = None):
    """`helm install` of the chart (CRD left to the session), `prepare()` if given, then the operator
    as a local process (with `env`) with a token of the chart's ServiceAccount, the watch scope and
    the leader election of the chart's Deployment. Yields what the tests read; stops the operator by
    PID and uninstalls the release after."""
    helm(cluster, "install", name, str(CHART), "-n", ns, "--set", "crds.install=false", *values,
         "--wait", "--timeout", "90s")
    op = None
    try:
        if prepare is not None:
            prepare()
        deployment = kjson(cluster, "deploy", "-n", ns, f"{name}-causalflow-ocr")
        sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        kubeconfig = tmp / "sa.kubeconfig"
        token = service_account_kubeconfig(cluster, ns, sa, kubeconfig)
        op = OperatorProcess(kubeconfig, watched_namespaces(deployment), tmp / "operator.log",
                             extra_env={"POD_NAMESPACE": ns, "POD_NAME": f"{name}-local", **(env or {})},
                             extra_args=leader_election_args(deployment)).start()
        yield {"namespace": ns, "name": name, "sa": sa, "user": f"system:serviceaccount:{ns}:{sa}",
               "token": token, "kubeconfig": kubeconfig, "log": op.log_path, "port": op.port,
               "watched": watched_namespaces(deployment), "started": time.time(), "process": op}
    finally:
        if op is not None:
            op.stop(timeout=15)
        helm(cluster, "uninstall", name, "-n", ns, "--wait", "--timeout", "60s", check=False)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def release(cluster, tmp_path_factory):
    """The chart installed with its default values (namespaced RBAC), and the operator running as
    its ServiceAccount."""
    ensure_crd(cluster)
    ns = create_namespace(cluster, "chart")
    try:
        with chart_operator(cluster, "ocr", ns, tmp_path_factory.mktemp("chart-operator")) as info:
            yield info
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


# --------------------------------------------------------------------------- the tests

@pytest.mark.parametrize("values", [[], ["--set", "watchNamespaces={NS}"], ["--set", "rbac.namespaced=false"]],
                         ids=["defaults", "namespaced RBAC, a list", "cluster-wide RBAC"])
def test_rendered_chart_passes_the_api_servers_server_side_dry_run(cluster, namespace, values):
    values = [v.replace("NS", namespace) for v in values]
    rendered = helm(cluster, "template", "dry", str(CHART), "-n", namespace, *values).stdout
    # Pods are admitted only when their ServiceAccount exists, which a dry run does not create.
    accounts = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "ServiceAccount"]
    cluster.apply(accounts)
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered, check=False)
    assert proc.returncode == 0, proc.stderr
    kinds = {line.split("/")[0] for line in proc.stdout.splitlines()}
    assert {"deployment.apps", "serviceaccount", "customresourcedefinition.apiextensions.k8s.io",
            "networkpolicy.networking.k8s.io"} <= kinds


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_passes_the_crds_validation_on_the_api_server(cluster, namespace, example):
    ensure_crd(cluster)
    docs = [d for d in yaml.safe_load_all(example.read_text()) if d]
    assert any(d["kind"] == "OcrService" for d in docs)
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    proc = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs), check=False)
    assert proc.returncode == 0, proc.stderr


def test_the_cluster_wide_opt_in_reconciles_an_ocrservice_in_any_namespace(private_cluster, tmp_path):
    """rbac.namespaced=false with no watchNamespaces: the operator watches, and may write in,
    every namespace. On a cluster of its own: it would reconcile the OcrServices of the tests that
    share the session's cluster too."""
    cluster = private_cluster
    ensure_crd(cluster)
    ns, namespace = create_namespace(cluster, "chartwide"), create_namespace(cluster, "elsewhere")
    try:
        with chart_operator(cluster, "wide", ns, tmp_path, "--set", "rbac.namespaced=false") as wide:
            assert wide["watched"] is None
            cluster.apply(ocrservice("anywhere", namespace, replicas=1))
            wait_for(lambda: condition(kjson(cluster, "ocrs", "anywhere", "-n", namespace), "Ready").get("status") == "True",
                     timeout=60, message=f"OcrService Ready in an unlisted namespace; log:\n{wide['log']}")
            assert cluster.kubectl("get", "deploy", "anywhere", "-n", namespace, check=False).returncode == 0
            assert cluster.kubectl("get", "clusterrolebinding", "wide-causalflow-ocr", check=False).returncode == 0
    finally:
        cluster.kubectl("delete", "namespace", ns, namespace, "--wait=false", check=False)


def set_rules(cluster, ns: str, role: str, rules: list[dict]) -> None:
    cluster.kubectl("patch", "role", role, "-n", ns, "--type=json",
                    "-p", json.dumps([{"op": "replace", "path": "/rules", "value": rules}]))


def without_monitoring_rules(cluster, ns: str, kept: dict[str, list[dict]]) -> None:
    """The release's Role without its monitoring.coreos.com rule, as a hand-written Role or a
    policy that strips it leaves it; its rules as they were go to `kept` (by Role name)."""
    for role in kjson(cluster, "roles", "-n", ns)["items"]:
        rules = [r for r in role["rules"] if "monitoring.coreos.com" not in r.get("apiGroups", [])]
        if rules != role["rules"]:
            kept[role["metadata"]["name"]] = role["rules"]
            set_rules(cluster, ns, role["metadata"]["name"], rules)
    assert len(kept) == 1, "the chart's Role should hold the monitoring rule"


def test_without_the_monitoring_rule_the_operator_goes_on_without_service_monitors_until_granted(private_cluster, tmp_path):
    """prometheus-operator's ServiceMonitor CRD installed, and the operator's Role without the
    monitoring.coreos.com rule: its listing and watch of ServiceMonitors are answered 403. The
    operator says which permission it lacks and manages everything else as if ServiceMonitors were
    not served: both OcrServices get Ready, the one that asks for a ServiceMonitor without it. The
    rule granted back, the ServiceMonitor follows at discovery's next look. On a cluster of its own:
    the CRD would reach the shared cluster's other tests."""
    cluster = private_cluster
    ensure_crd(cluster)
    install_crd(cluster, prometheus_operator_crd("ServiceMonitor"))
    ns, kept = create_namespace(cluster, "norules"), {}
    try:
        with chart_operator(cluster, "partial", ns, tmp_path, prepare=lambda: without_monitoring_rules(cluster, ns, kept),
                            env={"OCR_OPERATOR_DISCOVERY_SECONDS": "2"}) as op:
            cluster.apply(ocrservice("plain", ns, replicas=1))
            cluster.apply(ocrservice("scraped", ns, replicas=1, monitoring={"serviceMonitor": {"enabled": True}}))
            for name in ("plain", "scraped"):
                wait_for(lambda: condition(kjson(cluster, "ocrs", name, "-n", ns), "Ready").get("status") == "True",
                         timeout=60, message=f"OcrService {name} Ready without the monitoring rule; log:\n"
                                             f"{Path(op['log']).read_text()[-3000:]}")
            assert kjson(cluster, "servicemonitors.monitoring.coreos.com", "-n", ns)["items"] == []
            assert op["process"].alive(), "the operator exited"
            log = Path(op["log"]).read_text()
            assert f"may not list and watch servicemonitors.monitoring.coreos.com in {ns} (403)" in log, log[-3000:]
            # kopf never asked for what the operator's first listing found refused: its retries of a
            # 403 took a minute and logged an ERROR line each.
            retried = [line for line in log.splitlines() if "Request attempt" in line and "servicemonitors" in line]
            assert retried == [], retried[:3]
            for role, rules in kept.items():
                set_rules(cluster, ns, role, rules)
            sm = wait_for(lambda: cluster.get_object("servicemonitors.monitoring.coreos.com", "scraped", ns), timeout=60,
                          message=f"the ServiceMonitor once the rule is back; log:\n{Path(op['log']).read_text()[-3000:]}")
            assert sm["metadata"]["ownerReferences"][0]["name"] == "scraped"
            assert cluster.get_object("servicemonitors.monitoring.coreos.com", "plain", ns) is None
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_helm_install_brings_the_operator_deployment_up(cluster, release):
    deploy = kjson(cluster, "deploy", "-n", release["namespace"], "ocr-causalflow-ocr")
    assert deploy["status"].get("availableReplicas") == 1
    # The defaults: the release namespace alone, through a Role there.
    assert release["watched"] == [release["namespace"]]
    assert kjson(cluster, "rolebinding", "-n", release["namespace"], "ocr-causalflow-ocr")["subjects"][0]["name"] == release["sa"]
    assert cluster.kubectl("get", "clusterrolebinding", "ocr-causalflow-ocr", check=False).returncode != 0
    status = json.loads(helm(cluster, "status", release["name"], "-n", release["namespace"], "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"


def test_operator_under_the_charts_service_account_holds_the_leader_election_lease(cluster, release):
    """The Deployment's --leader-elect flags and the chart's Lease Role in the release namespace:
    the operator takes the Lease (a 403 would show in test_service_account_was_never_forbidden)."""
    ns, lease = release["namespace"], f"{release['name']}-causalflow-ocr"
    spec = wait_for(lambda: kjson(cluster, "lease", lease, "-n", ns)["spec"], timeout=30,
                    message=f"Lease {ns}/{lease}; log:\n{release['log']}")
    assert spec["holderIdentity"].startswith(f"{release['name']}-local_"), spec


def test_operator_under_the_charts_service_account_reconciles_an_ocrservice(cluster, release):
    ns = release["namespace"]
    cluster.apply(ocrservice("rbac-check", ns, autoscaling={"minReplicas": 1, "maxReplicas": 2},
                             networkPolicy={"enabled": True}))

    def ready():
        obj = kjson(cluster, "ocrs", "rbac-check", "-n", ns)
        return obj if condition(obj, "Ready").get("status") == "True" else None

    obj = wait_for(ready, timeout=60, message=f"OcrService Ready under the chart's RBAC; log:\n{release['log']}")
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    for kind, name in [("deploy", "rbac-check"), ("svc", "rbac-check"), ("cm", "rbac-check-config"),
                       ("hpa", "rbac-check"), ("pdb", "rbac-check"), ("networkpolicy", "rbac-check")]:
        assert cluster.kubectl("get", kind, name, "-n", ns, check=False).returncode == 0, f"{kind}/{name} missing"
    events = kjson(cluster, "events", "-n", ns, "--field-selector", "involvedObject.name=rbac-check")
    assert events["items"], "the operator posted no Event (events: create)"


def test_operator_under_the_charts_service_account_deletes_a_switched_off_child(cluster, release):
    ns = release["namespace"]
    cluster.apply(ocrservice("rbac-delete", ns, replicas=1, networkPolicy={"enabled": True}))
    wait_for(lambda: cluster.kubectl("get", "networkpolicy", "rbac-delete", "-n", ns, check=False).returncode == 0,
             timeout=60, message="NetworkPolicy created")
    cluster.kubectl("patch", "ocrs", "rbac-delete", "-n", ns, "--type=merge",
                    "-p", json.dumps({"spec": {"networkPolicy": {"enabled": False}}}))
    wait_for(lambda: cluster.kubectl("get", "networkpolicy", "rbac-delete", "-n", ns, check=False).returncode != 0,
             timeout=60, message=f"NetworkPolicy deleted under the chart's RBAC; log:\n{release['log']}")


def test_the_default_install_does_not_reconcile_an_ocrservice_in_another_namespace(cluster, release, namespace):
    cluster.apply(ocrservice("elsewhere", namespace, replicas=1))
    # A sync point: an OcrService applied after it in the watched namespace becomes Ready, so the
    # operator has seen the API server's state since.
    cluster.apply(ocrservice("after-elsewhere", release["namespace"], replicas=1))
    wait_for(lambda: condition(kjson(cluster, "ocrs", "after-elsewhere", "-n", release["namespace"]), "Ready")
             .get("status") == "True", timeout=60, message="OcrService Ready in the watched namespace")
    assert not (kjson(cluster, "ocrs", "elsewhere", "-n", namespace).get("status") or {}).get("conditions")
    assert kjson(cluster, "deploy", "-n", namespace)["items"] == []
    # Nor could it: the chart granted it nothing there.
    can = cluster.kubectl("auth", "can-i", "create", "deployments", "-n", namespace, f"--as={release['user']}", check=False)
    assert can.stdout.strip() == "no"


def test_service_account_was_never_forbidden(cluster, release):
    """After the reconciles above, neither the operator's log nor the audit log shows a 403."""
    log = release["log"].read_text()
    # Without each line's timestamp: its milliseconds can read 403 ("[... 22:32:36,403]"); and 403 as a
    # status, not inside a number or a name (a duration "0.403s", a generated suffix "-7d4039").
    messages = "\n".join(re.sub(r"^\[\d{4}-\d\d-\d\d [\d:,.]+\] ", "", line) for line in log.splitlines())
    found = [line for line in messages.splitlines()
             if re.search(r"(?<![\w.])403(?![\w.])", line) or "Forbidden" in line or "forbidden" in line]
    assert found == [], "\n".join(found[:10])
    if cluster.audit_log is None:
        pytest.skip("external cluster: no audit log (the operator log above was checked)")
    forbidden = []
    requests = 0
    for line in Path(cluster.audit_log).read_text().splitlines():
        event = json.loads(line)
        if event.get("user", {}).get("username") != release["user"]:
            continue
        requests += 1
        if event.get("responseStatus", {}).get("code") == 403:
            forbidden.append(f"{event['verb']} {event['requestURI']}")
    assert requests > 0, "the audit log has no request of the ServiceAccount"
    assert forbidden == []


def test_helm_test_hook_checks_pass_against_the_release(cluster, release, tmp_path):
    """The hook Pod's script (kwok cannot run it), run with the same ServiceAccount token."""
    kubeconfig = yaml.safe_load(release["kubeconfig"].read_text())
    server = kubeconfig["clusters"][0]["cluster"]
    ca = tmp_path / "ca.crt"
    if "certificate-authority-data" in server:
        import base64
        ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
    else:
        ca.write_text(Path(server["certificate-authority"]).read_text())
    token = tmp_path / "token"
    token.write_text(release["token"])
    env = dict(os.environ, KUBERNETES_API=server["server"], TOKEN_FILE=str(token), CA_FILE=str(ca),
               WATCH_NAMESPACES=release["namespace"], HEALTH_URL=f"http://127.0.0.1:{release['port']}/healthz")
    proc = subprocess.run([sys.executable, str(CHART / "files" / "helm-test.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ok   CRD" in proc.stdout and "ok   RBAC" in proc.stdout and "ok   liveness" in proc.stdout


def test_helm_test_hook_fails_for_a_namespace_the_release_may_not_read(cluster, release, tmp_path):
    server = yaml.safe_load(release["kubeconfig"].read_text())["clusters"][0]["cluster"]
    import base64
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(server["certificate-authority-data"]))
    token = tmp_path / "token"
    token.write_text(release["token"])
    env = dict(os.environ, KUBERNETES_API=server["server"], TOKEN_FILE=str(token), CA_FILE=str(ca),
               WATCH_NAMESPACES="kube-system")
    proc = subprocess.run([sys.executable, str(CHART / "files" / "helm-test.py")], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "FAIL RBAC: HTTP 403" in proc.stdout


def test_helm_upgrade_and_uninstall_keep_the_crd_and_existing_ocrservices(cluster, namespace):
    ensure_crd(cluster)
    release = "keep"
    adopt_crd(cluster, release, namespace)
    uid = crd(cluster)["metadata"]["uid"]
    helm(cluster, "install", release, str(CHART), "-n", namespace, "--set", f"watchNamespaces={{{namespace}}}")
    assert crd(cluster)["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    cluster.apply(ocrservice("survivor", namespace, replicas=1))

    helm(cluster, "upgrade", release, str(CHART), "-n", namespace, "--reuse-values", "--set", "logLevel=debug")
    after_upgrade = crd(cluster)
    assert after_upgrade["metadata"]["uid"] == uid, "helm upgrade replaced the CRD"
    assert condition(after_upgrade, "Established").get("status") == "True"
    args = kjson(cluster, "deploy", "-n", namespace, "keep-causalflow-ocr")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--log-level=debug" in args, "the upgrade did not reach the operator Deployment"

    helm(cluster, "uninstall", release, "-n", namespace, "--wait", "--timeout", "60s")
    after_uninstall = crd(cluster)
    assert after_uninstall is not None and after_uninstall["metadata"]["uid"] == uid, "helm uninstall removed the CRD"
    for kind, name in API_OBJECTS[1:]:
        assert cluster.kubectl("get", kind, name, check=False).returncode == 0, f"helm uninstall removed {kind} {name}"
    assert kjson(cluster, "ocrs", "survivor", "-n", namespace)["spec"]["replicas"] == 1
    assert cluster.kubectl("get", "deploy", "keep-causalflow-ocr", "-n", namespace, check=False).returncode != 0
    assert cluster.kubectl("get", "clusterrole", "keep-causalflow-ocr-crd-reader", check=False).returncode != 0
