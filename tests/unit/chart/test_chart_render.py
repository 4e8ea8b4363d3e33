"""helm lint passes, and what the chart renders is valid Kubernetes and least privilege."""

import json

import jsonschema
import kubernetes_validate
import pytest
import yaml

from localcluster.versions import K8S_VERSION as CLUSTER_K8S_VERSION
from tests.unit.chart.helm import CHART, by_kind, objects, run_helm, template

# The local control plane's minor (localcluster/versions.env), as `helm template --kube-version` takes it.
K8S_VERSION = ".".join(CLUSTER_K8S_VERSION.removeprefix("v").split(".")[:2]) + ".0"

VALUE_SETS = {
    "defaults": {},
    "namespaced RBAC, two watched namespaces": {"watchNamespaces": "{team-a,team-b}"},
    "cluster-wide RBAC, every namespace": {"rbac.namespaced": "false"},
    "cluster RBAC, one watched namespace": {"rbac.namespaced": "false", "watchNamespaces": "{team-a}"},
    "no network policy, no readiness probe": {"networkPolicy.enabled": "false", "readinessProbe.enabled": "false"},
    "digest, no probe, no tests, CRD elsewhere": {
        "image.digest": "sha256:" + "a" * 64, "livenessProbe.enabled": "false",
        "tests.enabled": "false", "crds.install": "false",
    },
}


LEADER_ELECTION = "ocr-causalflow-ocr-leader-election"


def _watch_rbac(rendered: str, kind: str) -> list[dict]:
    """The Roles or RoleBindings for the watched namespaces (not leader election's own)."""
    return [o for o in by_kind(rendered, kind) if o["metadata"]["name"] != LEADER_ELECTION]


def _operator(rendered: str) -> dict:
    [deployment] = by_kind(rendered, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_passes_in_strict_mode(values):
    args = [f"--set={k}={v}" for k, v in values.items()]
    result = run_helm("lint", "--strict", str(CHART), *args)
    assert "0 chart(s) failed" in result.stdout


def test_the_manifest_reader_refuses_a_duplicate_key_that_yaml_would_silently_overwrite():
    assert objects("---\nkind: A\n---\n\n---\nkind: B\nspec: {x: 1}\n") == [{"kind": "A"}, {"kind": "B", "spec": {"x": 1}}]
    with pytest.raises(AssertionError, match="duplicate key 'image' at line 4"):
        objects("kind: Deployment\nspec:\n  image: a\n  image: b\n")


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rendered_objects_validate_against_the_kubernetes_schemas(values):
    rendered = objects(template(values))
    assert rendered, "nothing rendered"
    for obj in rendered:
        # strict: unknown fields are errors too
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_values_yaml_satisfies_values_schema():
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)  # draft 7: Helm 3 and 4 both read it
    jsonschema.Draft7Validator(schema).validate(yaml.safe_load((CHART / "values.yaml").read_text()))


@pytest.mark.parametrize("bad", [
    "logLevel=verbose", "rbac.namespaced=maybe", "watchNamespaces={Not_A_Namespace}",
    "image.pullPolicy=Sometimes", "livenessProbe.port=80", "unknownKey=1", "metrics.port=80",
    "monitoring.serviceMonitor.interval=often", "replicaCount=0", "leaderElection.retryPeriodSeconds=0",
])
def test_values_schema_rejects_invalid_values(bad):
    result = run_helm("template", "x", str(CHART), "--set", bad, check=False)
    assert result.returncode != 0
    assert "schema" in result.stderr.lower()


def test_the_default_rbac_is_a_role_in_the_release_namespace_which_alone_is_watched():
    rendered = template()
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in _watch_rbac(rendered, "Role")] == [
        ("ocr-system", "ocr-causalflow-ocr")]
    assert [o["metadata"]["namespace"] for o in _watch_rbac(rendered, "RoleBinding")] == ["ocr-system"]
    assert [o["metadata"]["name"] for o in by_kind(rendered, "ClusterRoleBinding")] == ["ocr-causalflow-ocr-crd-reader"]
    args = _operator(rendered)["args"]
    assert "--namespace=ocr-system" in args and "--all-namespaces" not in args


def test_cluster_mode_is_an_opt_in_that_binds_one_cluster_role_and_watches_all_namespaces():
    rendered = template({"rbac.namespaced": "false"})
    assert [o["metadata"]["name"] for o in by_kind(rendered, "ClusterRoleBinding")] == ["ocr-causalflow-ocr"]
    assert _watch_rbac(rendered, "Role") == [] and _watch_rbac(rendered, "RoleBinding") == []
    assert "--all-namespaces" in _operator(rendered)["args"]


def test_namespaced_mode_creates_a_role_and_binding_in_each_watched_namespace():
    rendered = template(VALUE_SETS["namespaced RBAC, two watched namespaces"])
    roles = {o["metadata"]["namespace"] for o in _watch_rbac(rendered, "Role")}
    bindings = {o["metadata"]["namespace"] for o in _watch_rbac(rendered, "RoleBinding")}
    assert roles == bindings == {"team-a", "team-b"}
    args = _operator(rendered)["args"]
    assert "--namespace=team-a" in args and "--namespace=team-b" in args and "--all-namespaces" not in args
    for binding in by_kind(rendered, "RoleBinding"):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ocr-causalflow-ocr", "namespace": "ocr-system"}]


def test_namespaced_mode_without_a_list_watches_only_the_release_namespace():
    rendered = template({"rbac.namespaced": "true"})
    assert {o["metadata"]["namespace"] for o in by_kind(rendered, "Role")} == {"ocr-system"}
    assert "--namespace=ocr-system" in _operator(rendered)["args"]


def test_namespaced_mode_grants_nothing_cluster_wide_but_kopfs_crd_and_namespace_reads():
    rendered = template(VALUE_SETS["namespaced RBAC, two watched namespaces"])
    [cluster_role] = by_kind(rendered, "ClusterRole")
    assert cluster_role["rules"] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
    ]


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_rbac_has_no_wildcards_no_secret_listing_and_no_escalation(values):
    rendered = template(values)
    for role in by_kind(rendered, "ClusterRole") + by_kind(rendered, "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], rule
            assert not {"nodes", "roles", "clusterroles", "rolebindings"} & set(rule["resources"]), rule
            # Secrets: get by name (an OcrBatch's S3 credentials' presence and its callback key), create
            # and patch (the gate key's own Secret, patched only after its ownerReference tested); never listed.
            assert "secrets" not in rule["resources"] or set(rule["verbs"]) <= {"get", "create", "patch"}, rule
            assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"]), rule
            if "update" in rule["verbs"]:  # blockOwnerDeletion on children; renewing the one Lease
                assert (rule["resources"], rule["verbs"]) in ((["ocrservices/finalizers"], ["update"]),
                                                              (["ocrbatches/finalizers"], ["update"])) or (
                    rule["resources"] == ["leases"] and rule["resourceNames"] == ["ocr-causalflow-ocr"]), rule


def test_the_operator_reads_its_gate_key_seed_from_a_mounted_secret_of_its_own():
    rendered = template()
    [seed] = [s for s in by_kind(rendered, "Secret") if s["metadata"]["name"].endswith("-gate-key-seed")]
    [deployment] = by_kind(rendered, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == seed["metadata"]["name"]]
    container = pod["containers"][0]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert mount["readOnly"] and env["OCR_OPERATOR_GATE_KEY_SEED_FILE"] == f"{mount['mountPath']}/seed"
    assert len(seed["data"]["seed"]) >= 48


def test_operator_container_is_locked_down():
    rendered = template()
    [deployment] = by_kind(rendered, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = _operator(rendered)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["memory"]


def test_leader_election_is_on_and_lets_a_new_pod_stand_by_before_the_old_one_stops():
    rendered = template({"replicaCount": "2"})
    [deployment] = by_kind(rendered, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate",
                                              "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    args = _operator(rendered)["args"]
    assert args[args.index("--leader-elect"):][:5] == [
        "--leader-elect", "--leader-elect-resource-name=ocr-causalflow-ocr", "--leader-elect-lease-duration=15",
        "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"]
    env = {e["name"]: e.get("valueFrom") for e in _operator(rendered)["env"]}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}  # where the Lease lives
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}  # who holds it


def test_leader_election_gets_a_role_for_its_lease_in_the_release_namespace_only():
    for values in ({}, {"rbac.namespaced": "false"}, {"watchNamespaces": "{team-a}"}):
        rendered = template(values)
        [role] = [r for r in by_kind(rendered, "Role") if r["metadata"]["name"] == LEADER_ELECTION]
        [binding] = [b for b in by_kind(rendered, "RoleBinding") if b["metadata"]["name"] == LEADER_ELECTION]
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "ocr-system"
        assert {res for rule in role["rules"] for res in rule["resources"]} == {"leases"}
        assert binding["roleRef"]["name"] == LEADER_ELECTION
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "ocr-causalflow-ocr", "namespace": "ocr-system"}]


def test_without_leader_election_one_replica_with_recreate_so_two_operators_never_overlap():
    rendered = template({"leaderElection.enabled": "false"})
    [deployment] = by_kind(rendered, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not [a for a in _operator(rendered)["args"] if a.startswith("--leader-elect")]
    assert LEADER_ELECTION not in [r["metadata"]["name"] for r in by_kind(rendered, "Role")]
    refused = run_helm("template", "x", str(CHART), "--set", "leaderElection.enabled=false", "--set", "replicaCount=2",
                       check=False)
    assert refused.returncode != 0 and "replicaCount > 1 needs leaderElection.enabled" in refused.stderr


def test_liveness_probe_reads_the_endpoint_kopf_serves():
    container = _operator(template({"livenessProbe.port": "9090"}))
    assert "--liveness-port=9090" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 9090, "protocol": "TCP"} in container["ports"]


def test_disabling_the_liveness_probe_turns_off_endpoint_probe_and_port():
    container = _operator(template({"livenessProbe.enabled": "false"}))
    assert "--liveness-port=0" in container["args"]
    assert "livenessProbe" not in container and [p["name"] for p in container["ports"]] == ["metrics"]


def test_the_operator_serves_its_metrics_on_a_named_port_behind_a_metrics_service():
    rendered = template({"metrics.port": "9100"})
    container = _operator(rendered)
    assert "--metrics-port=9100" in container["args"]
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    [svc] = [s for s in by_kind(rendered, "Service") if s["metadata"]["name"].endswith("-metrics")]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"}]
    [deployment] = by_kind(rendered, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_disabling_metrics_turns_off_the_flag_port_and_service():
    rendered = template({"metrics.enabled": "false", "livenessProbe.enabled": "false"})
    container = _operator(rendered)
    assert "--metrics-port=0" in container["args"] and "ports" not in container
    assert not [s for s in by_kind(rendered, "Service") if s["metadata"]["name"].endswith("-metrics")]


def test_the_operators_servicemonitor_selects_only_the_metrics_service_and_port():
    rendered = template({"monitoring.serviceMonitor.enabled": "true", "monitoring.serviceMonitor.labels.release": "kps"})
    [sm] = by_kind(rendered, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kps"
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    matching = [s["metadata"]["name"] for s in by_kind(rendered, "Service")
                if sm["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert matching == [sm["metadata"]["name"] + "-metrics"]
    assert not by_kind(template(), "ServiceMonitor")  # off by default: it needs the Prometheus Operator


@pytest.mark.parametrize("level", ["debug", "info", "warning", "error"])
def test_log_level_maps_one_to_one_to_the_operator_flag(level):
    args = _operator(template({"logLevel": level}))["args"]
    assert [a for a in args if a.startswith("--log-level") or a in ("--debug", "--verbose", "-v")] == [f"--log-level={level}"]


def test_operator_args_are_accepted_by_the_operators_own_parser(monkeypatch):
    from ocr_operator.__main__ import parse_args

    monkeypatch.setenv("POD_NAMESPACE", "ocr-system")  # the pod's, from the downward API (the Lease's namespace)
    for values in VALUE_SETS.values():
        args = _operator(template(values))["args"]
        parsed = parse_args(args)
        assert parsed.all_namespaces or parsed.namespace


def test_image_defaults_to_app_version_and_prefers_a_digest():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert _operator(template())["image"].endswith(":" + chart["appVersion"])
    digest = "sha256:" + "b" * 64
    assert _operator(template({"image.digest": digest}))["image"].endswith("@" + digest)


def test_helm_test_hook_is_a_pod_running_the_checks_with_the_operator_account():
    rendered = objects(run_helm("template", "ocr", str(CHART), "-n", "ocr-system", "--show-only",
                                "templates/tests/test-operator.yaml").stdout)
    [pod] = [o for o in rendered if o["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["serviceAccountName"] == "ocr-causalflow-ocr"
    assert pod["spec"]["restartPolicy"] == "Never"
    script = pod["spec"]["containers"][0]["args"][0]
    assert script == (CHART / "files" / "helm-test.py").read_text()
    compile(script, "helm-test.py", "exec")
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["HEALTH_URL"] == "http://ocr-causalflow-ocr-health:8080/healthz"


def test_notes_name_the_watched_namespaces_and_the_kept_crd():
    result = run_helm("install", "ocr", str(CHART), "-n", "ocr-system", "--dry-run=client",
                      "--set", "rbac.namespaced=true", "--set", "watchNamespaces={team-a}")
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "team-a" in notes and "resource-policy: keep" in notes and "kubectl get ocrs" in notes


def test_operator_pods_never_match_an_ocrservice_selector_even_with_the_same_name():
    # An OcrService's pods are selected by app.kubernetes.io/name=causalflow-ocr + instance=<name>.
    [deployment] = by_kind(template(release="ocr", namespace="ocr"), "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    ocrservice_selector = {"app.kubernetes.io/name": "causalflow-ocr", "app.kubernetes.io/instance": "ocr"}
    assert not ocrservice_selector.items() <= pod_labels.items()


def test_readiness_probe_reads_kopfs_endpoint_so_helm_wait_waits_for_a_started_operator():
    container = _operator(template())
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert {"name": "health", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    assert "readinessProbe" not in _operator(template({"readinessProbe.enabled": "false"}))
    # No endpoint, no probe on it.
    assert "readinessProbe" not in _operator(template({"livenessProbe.enabled": "false"}))


def _quantity_mi(q: str) -> int:
    return int(q[:-2]) * {"Mi": 1, "Gi": 1024}[q[-2:]]


def test_operator_ephemeral_storage_is_requested_and_limited_above_its_tmp_volume():
    rendered = template()
    [deployment] = by_kind(rendered, "Deployment")
    [tmp] = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp"]
    resources = _operator(rendered)["resources"]
    assert _quantity_mi(resources["requests"]["ephemeral-storage"]) > 0
    assert _quantity_mi(resources["limits"]["ephemeral-storage"]) > _quantity_mi(tmp["emptyDir"]["sizeLimit"])


# The quality gate's requests: to the OCR server pods (operator/ocr_operator/naming.py's labels), any namespace.
SERVER_PODS_EGRESS = {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
    "app.kubernetes.io/name": "causalflow-ocr", "app.kubernetes.io/component": "inference-server"}}}]}


def _policy(rendered: str, name: str) -> dict:
    [policy] = [p for p in by_kind(rendered, "NetworkPolicy") if p["metadata"]["name"] == name]
    return policy


def test_operator_network_policy_admits_only_the_health_and_metrics_ports_and_egress_to_the_api_server():
    rendered = template()
    policy = _policy(rendered, "ocr-causalflow-ocr")
    [deployment] = by_kind(rendered, "Deployment")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"port": 8080, "protocol": "TCP"}, {"port": 8081, "protocol": "TCP"}]}]
    # No DNS: the operator reaches the API server by the address the kubelet gives it, and the OCR
    # server pods by their IPs (the quality gate).
    assert policy["spec"]["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]},
                                        SERVER_PODS_EGRESS]


def test_operator_network_policy_can_pin_the_api_server_and_the_scrapers():
    rendered = template(extra=("--set", "networkPolicy.apiServer.cidrs={10.0.0.1/32}",
                               "--set", "networkPolicy.apiServer.ports={6443}",
                               "--set-json", 'networkPolicy.ingressFrom=[{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]',
                               "--set", "livenessProbe.enabled=false"))
    spec = _policy(rendered, "ocr-causalflow-ocr")["spec"]
    assert spec["egress"] == [{"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]},
                              SERVER_PODS_EGRESS]
    assert spec["ingress"] == [{"ports": [{"port": 8081, "protocol": "TCP"}],
                                "from": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]}]


def test_the_operator_may_reach_callback_receivers_only_where_the_values_open_egress():
    receiver = {"to": [{"ipBlock": {"cidr": "203.0.113.10/32"}}], "ports": [{"port": 443, "protocol": "TCP"}]}
    rendered = template(extra=("--set-json", f"networkPolicy.callbackEgress=[{json.dumps(receiver)}]"))
    assert _policy(rendered, "ocr-causalflow-ocr")["spec"]["egress"][-1] == receiver


def test_with_health_and_metrics_off_the_operator_pod_accepts_no_connection():
    rendered = template({"livenessProbe.enabled": "false", "metrics.enabled": "false"})
    assert _policy(rendered, "ocr-causalflow-ocr")["spec"]["ingress"] == []


def test_the_helm_test_pod_has_its_own_network_policy_created_before_it():
    rendered = objects(run_helm("template", "ocr", str(CHART), "-n", "ocr-system", "--show-only",
                                "templates/tests/test-operator.yaml").stdout)
    pod = next(o for o in rendered if o["kind"] == "Pod")
    policy = next(o for o in rendered if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert int(policy["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        pod["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
    assert policy["spec"]["ingress"] == []
    ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]]
    assert 53 in ports and 8080 in ports  # DNS (kubernetes.default.svc, the health Service) and the health port
