"""Render functions: spec -> child manifests, checked field by field without a cluster."""

from __future__ import annotations

import math

import pytest
import yaml

from ocr_limits import GRACEFUL_SHUTDOWN_MARGIN_SEC
from ocr_operator.ocrservice import naming
from ocr_operator.ocrservice.render import render_all
from ocr_operator.ocrservice.render import deployment as D

from .helpers import owner, parsed

SERVER_ENV = {"INPUT_SIZE", "BASE_SIZE", "MAX_VISUAL_TOKENS", "MIN_VISUAL_TOKENS", "CACHE_DIR", "MODEL_NAME",
              "GPU_ID", "CONCURRENCY", "BATCH_SIZE", "TIMEOUT_SEC", "MAX_NEW_TOKENS", "HOST", "PORT"}


def children(spec=None, **kw):
    body = owner(spec)
    return render_all(body, parsed(body), **kw)


def container(dep):
    return dep["spec"]["template"]["spec"]["containers"][0]


def env_of(dep):
    return {e["name"]: e for e in container(dep)["env"]}


def test_every_child_is_owned_by_the_ocrservice_and_labelled():
    objs = children({"autoscaling": {}, "networkPolicy": {"enabled": True}, "monitoring": {"serviceMonitor": {"enabled": True},
                                                                     "prometheusRule": {"enabled": True}}}).objects
    for kind, obj in objs.items():
        assert obj is not None, kind
        md = obj["metadata"]
        assert md["ownerReferences"] == [{
            "apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "name": "ocr",
            "uid": "11111111-2222-3333-4444-555555555555", "controller": True, "blockOwnerDeletion": True}], kind
        assert md["labels"]["app.kubernetes.io/instance"] == "ocr", kind
        assert md["labels"]["app.kubernetes.io/managed-by"] == "causalflow-ocr-operator", kind
        assert md["namespace"] == "team-a", kind


def test_the_deployment_requests_and_limits_the_gpus():
    dep = children({"resources": {"gpus": 1, "cpu": "8", "memory": "40Gi"}}).objects["Deployment"]
    res = container(dep)["resources"]
    assert res["requests"] == {"cpu": "8", "memory": "40Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "1536Mi"}
    assert res["limits"] == {"memory": "40Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "1536Mi"}


def test_a_cpu_only_pod_requests_no_gpu_and_gets_no_gpu_toleration():
    dep = children({"resources": {"gpus": 0}, "replicas": 1}).objects["Deployment"]
    assert "nvidia.com/gpu" not in container(dep)["resources"]["requests"]
    assert "tolerations" not in dep["spec"]["template"]["spec"]


def test_a_gpu_pod_tolerates_the_gpu_taint_besides_the_users_tolerations():
    dep = children({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ocr", "effect": "NoSchedule"}]}
                   ).objects["Deployment"]
    assert dep["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ocr", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_node_selector_affinity_priority_and_pull_secrets_reach_the_pod():
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}
    pod = children({"nodeSelector": {"nvidia.com/gpu.product": "H100"}, "affinity": aff, "priorityClassName": "gpu",
                    "imagePullSecrets": [{"name": "regcred"}]}).objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "H100"}
    assert pod["affinity"] == aff
    assert pod["priorityClassName"] == "gpu"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]


def test_a_runtime_class_reaches_the_pod_and_none_is_set_without_one():
    with_class = children({"runtimeClassName": "nvidia"}).objects["Deployment"]["spec"]["template"]["spec"]
    assert with_class["runtimeClassName"] == "nvidia"
    assert "runtimeClassName" not in children({}).objects["Deployment"]["spec"]["template"]["spec"]


def test_the_server_config_has_one_channel_the_config_file_not_env_overrides():
    objs = children({"inference": {"maxVisualTokens": 832, "batchSize": 4, "timeoutSeconds": 12}}).objects
    env = env_of(objs["Deployment"])
    assert not (SERVER_ENV & set(env)), sorted(SERVER_ENV & set(env))
    assert env["CONFIG_FILE"]["value"] == "/etc/ocr/config.yaml"
    cfg = yaml.safe_load(objs["ConfigMap"]["data"]["config.yaml"])
    assert cfg["model"]["max_visual_tokens"] == 832
    assert cfg["runtime"]["batch_size"] == 4 and cfg["runtime"]["timeout_sec"] == 12
    assert cfg["runtime"]["gpu_id"] == 0 and cfg["service"]["port"] == 8080
    assert "API_KEYS" not in env


def test_api_keys_come_from_the_secret_never_from_the_configmap():
    objs = children({"auth": {"secretName": "ocr-keys"}}).objects
    text = objs["ConfigMap"]["data"]["config.yaml"].lower()
    assert "api_keys" not in text and "ocr-keys" not in text


def test_api_keys_are_a_file_of_the_mounted_secret_so_a_rotation_reaches_the_running_server():
    """An env var from secretKeyRef never changes in a running pod; a mounted Secret volume's files
    do (not with subPath), and the server re-reads API_KEYS_FILE."""
    objs = children({"auth": {"secretName": "ocr-keys", "key": "tokens"}}).objects
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    env = env_of(objs["Deployment"])
    assert "API_KEYS" not in env and env["API_KEYS_FILE"] == {"name": "API_KEYS_FILE", "value": "/etc/ocr/auth/api-keys"}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "api-keys"]
    assert pod["securityContext"]["fsGroup"] == 10001  # the server's group: it reads the 0440 file
    assert volume["secret"] == {"secretName": "ocr-keys", "defaultMode": 0o440,
                                "items": [{"key": "tokens", "path": "api-keys"}]}
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "api-keys"]
    assert mount == {"name": "api-keys", "mountPath": "/etc/ocr/auth", "readOnly": True}


def test_the_tls_secret_is_a_whole_volume_mount_so_a_renewal_reaches_the_running_server():
    objs = children({"tls": {"secretName": "ocr-tls"}}).objects
    pod = objs["Deployment"]["spec"]["template"]["spec"]
    env = env_of(objs["Deployment"])
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls"]
    assert "subPath" not in mount and mount["mountPath"] == "/etc/ocr/tls"
    assert env["TLS_CERT_FILE"]["value"] == "/etc/ocr/tls/tls.crt" and env["TLS_KEY_FILE"]["value"] == "/etc/ocr/tls/tls.key"
    assert all("subPath" not in m for m in pod["containers"][0]["volumeMounts"] if m["name"] in ("tls", "api-keys"))


def test_user_env_overrides_an_operator_value_and_adds_its_own():
    """A variable the operator sets without an OcrService field (HF_HUB_OFFLINE); a setting that
    has a field (BATCH_SIZE: spec.inference.batchSize) is refused by spec validation instead."""
    dep = children({"env": [{"name": "HF_HUB_OFFLINE", "value": "0"}, {"name": "LOG_LEVEL", "value": "debug"}]}
                   ).objects["Deployment"]
    names = [e["name"] for e in container(dep)["env"]]
    assert names.count("HF_HUB_OFFLINE") == 1
    assert env_of(dep)["HF_HUB_OFFLINE"]["value"] == "0"
    assert names[-1] == "LOG_LEVEL"


def test_probes_use_the_health_endpoints_and_the_startup_budget_comes_from_model_load_timeout():
    dep = children({"rollout": {"modelLoadTimeoutSeconds": 95, "progressDeadlineSeconds": 600,
                                "healthCheck": {"periodSeconds": 10, "failureThreshold": 3}}}).objects["Deployment"]
    c = container(dep)
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert c["startupProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["readinessProbe"]["failureThreshold"] == 3
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 95
    assert c["startupProbe"]["failureThreshold"] == math.ceil(95 / 10)


def test_rollouts_never_take_a_serving_pod_down_first():
    dep = children({"rollout": {"maxSurge": "50%", "revisionHistoryLimit": 7}}).objects["Deployment"]
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}
    assert dep["spec"]["revisionHistoryLimit"] == 7
    assert dep["spec"]["progressDeadlineSeconds"] == 1800
    assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 60


def test_a_rollout_without_room_for_a_surge_pod_stops_an_old_pod_first_when_asked():
    dep = children({"rollout": {"maxSurge": 0, "maxUnavailable": 1}}).objects["Deployment"]
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


def test_the_deployment_runs_spec_replicas_which_with_autoscaling_is_the_hpas_within_its_bounds():
    assert children({"replicas": 3}).objects["Deployment"]["spec"]["replicas"] == 3
    assert children().objects["Deployment"]["spec"]["replicas"] == 1
    autoscaled = {"minReplicas": 2, "maxReplicas": 4}
    assert children({"replicas": 3, "autoscaling": autoscaled}).objects["Deployment"]["spec"]["replicas"] == 3
    assert children({"replicas": 1, "autoscaling": autoscaled}).objects["Deployment"]["spec"]["replicas"] == 2
    assert children({"replicas": 7, "autoscaling": autoscaled}).objects["Deployment"]["spec"]["replicas"] == 4


def test_the_revision_is_the_hash_of_the_pod_template_and_is_stamped_on_it():
    d = children()
    dep = d.objects["Deployment"]
    tpl = dep["spec"]["template"]
    assert tpl["metadata"]["labels"][naming.REVISION_KEY] == d.revision == naming.template_hash(tpl)
    assert dep["metadata"]["annotations"][naming.REVISION_KEY] == d.revision
    assert len(d.revision) == 10 and int(d.revision, 16) >= 0


def test_a_new_image_is_a_new_revision_but_a_new_size_is_not():
    base = children({"replicas": 1}).revision
    assert children({"replicas": 5}).revision == base
    assert children({"replicas": 1, "image": "registry.example/ocr-server:2.0"}).revision != base
    assert children({"replicas": 1, "inference": {"batchSize": 2}}).revision != base


def test_pod_labels_and_annotations_reach_the_pods_but_not_the_selector():
    dep = children({"podLabels": {"team": "docs"}, "podAnnotations": {"prometheus.io/scrape": "true"}}
                   ).objects["Deployment"]
    tpl = dep["spec"]["template"]["metadata"]
    assert tpl["labels"]["team"] == "docs"
    assert tpl["annotations"]["prometheus.io/scrape"] == "true"
    assert dep["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": "causalflow-ocr",
                                                       "app.kubernetes.io/instance": "ocr"}}


def test_the_weights_pvc_is_mounted_at_the_cache_dir():
    dep = children({"model": {"cacheDir": "/weights", "pvc": {"claimName": "ocr-weights"}}}).objects["Deployment"]
    pod = dep["spec"]["template"]["spec"]
    assert {"name": "weights", "persistentVolumeClaim": {"claimName": "ocr-weights", "readOnly": True}} in pod["volumes"]
    assert {"name": "weights", "mountPath": "/weights", "readOnly": True} in container(dep)["volumeMounts"]
    objs = children({"model": {"cacheDir": "/weights", "pvc": {"claimName": "ocr-weights"}}}).objects
    assert yaml.safe_load(objs["ConfigMap"]["data"]["config.yaml"])["model"]["cache_dir"] == "/weights"


def test_the_pod_runs_non_root_with_a_read_only_root_filesystem():
    dep = children().objects["Deployment"]
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    sc = container(dep)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in container(dep)["volumeMounts"]


def test_the_configmap_holds_service_model_and_runtime_sections():
    cm = children({"inference": {"concurrency": 2, "batchSize": 16}, "model": {"path": "/opt/model"}}).objects["ConfigMap"]
    assert cm["metadata"]["name"] == "ocr-config"
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    assert set(cfg) == {"service", "model", "runtime"}
    assert cfg["service"] == {"host": "0.0.0.0", "port": 8080}
    assert cfg["runtime"] == {"engine": "transformers", "gpu_id": 0, "concurrency": 2, "batch_size": 16, "timeout_sec": 30,
                              "max_new_tokens": 8192}
    assert cfg["model"]["path"] == "/opt/model"
    assert cfg["model"]["max_visual_tokens"] == 1024


def config_yaml(inference: dict) -> str:
    return children({"inference": inference}).objects["ConfigMap"]["data"]["config.yaml"]


def test_decode_slots_reaches_the_server_when_set_and_zero_leaves_the_config_as_before_the_field(tmp_path):
    config = pytest.importorskip("ocr_server.runtime.config", reason="the server package is not installed in this venv")
    assert config_yaml({"decodeSlots": 0}) == config_yaml({}) and "decode_slots" not in config_yaml({})
    path = tmp_path / "config.yaml"
    path.write_text(config_yaml({"decodeSlots": 16}))
    assert config.load_config(str(path), env={}).runtime.decode_slots == 16


def test_a_config_change_rolls_the_pods_through_the_config_hash():
    a = children({"inference": {"concurrency": 2}}).objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    b = children({"inference": {"concurrency": 3}}).objects["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert a[D.CONFIG_HASH_KEY] != b[D.CONFIG_HASH_KEY]


def test_the_hpa_reads_the_gpu_utilisation_pods_metric_with_the_target():
    hpa = children({"autoscaling": {"minReplicas": 2, "maxReplicas": 6, "targetGPUUtilization": 70}}
                   ).objects["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    # The OcrService's scale subresource, not the Deployment: GET .../scale shows the HPA's choice.
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
                                             "name": "ocr"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    assert hpa["spec"]["metrics"] == [{"type": "Pods", "pods": {
        "metric": {"name": "DCGM_FI_DEV_GPU_UTIL"}, "target": {"type": "AverageValue", "averageValue": "70"}}}]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300


def test_the_hpa_behavior_from_the_spec_overrides_the_defaults_per_direction():
    hpa = children({"autoscaling": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}}}
                   ).objects["HorizontalPodAutoscaler"]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 0
    assert hpa["spec"]["behavior"]["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 120}]
    assert hpa["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0


def test_a_queue_depth_metric_uses_its_own_target_value():
    hpa = children({"autoscaling": {"metric": {"name": "ocr_queue_depth", "targetAverageValue": "4"}}}
                   ).objects["HorizontalPodAutoscaler"]
    assert hpa["spec"]["metrics"][0]["pods"] == {"metric": {"name": "ocr_queue_depth"},
                                                 "target": {"type": "AverageValue", "averageValue": "4"}}


def test_an_open_schedule_window_raises_the_hpa_minimum():
    import datetime as dt
    d = children({"autoscaling": {"minReplicas": 1, "maxReplicas": 5, "schedules": [
        {"name": "always", "start": "00:00", "end": "23:59", "minReplicas": 3}]}},
        now=dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.timezone.utc))
    assert d.objects["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 3
    assert d.active_schedule == "always"


@pytest.mark.parametrize("spec, wanted", [
    ({"replicas": 1}, False),
    ({"replicas": 2}, True),
    ({"autoscaling": {"minReplicas": 1, "maxReplicas": 1}}, False),
    ({"autoscaling": {"maxReplicas": 3}}, True),
    ({"replicas": 3, "podDisruptionBudget": {"enabled": False}}, False),
])
def test_a_pdb_exists_only_when_more_than_one_pod_can_exist(spec, wanted):
    pdb = children(spec).objects["PodDisruptionBudget"]
    assert (pdb is not None) is wanted
    if pdb:
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "ocr"


def test_fixed_replicas_render_no_hpa():
    assert children({"replicas": 2}).objects["HorizontalPodAutoscaler"] is None


def test_the_service_targets_the_server_port_of_the_pods():
    svc = children({"service": {"port": 9000, "type": "LoadBalancer"}}).objects["Service"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["ports"][0]["port"] == 9000 and svc["spec"]["ports"][0]["targetPort"] == "http"
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "causalflow-ocr", "app.kubernetes.io/instance": "ocr"}


def test_the_network_policy_exists_only_when_asked_and_lists_the_sources():
    assert children().objects["NetworkPolicy"] is None
    np = children({"networkPolicy": {"enabled": True, "allowedNamespaces": ["gateway"], "allowedCIDRs": ["10.0.0.0/8"]}}
                  ).objects["NetworkPolicy"]
    assert np["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}], "from": [
        {"podSelector": {}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}}]}]


def test_with_shadow_pages_the_network_policy_admits_the_services_own_pods():
    shadow = {"qualityGate": {"goldenPages": {"configMapName": "golden"}, "shadow": {}}}
    np = children({"networkPolicy": {"enabled": True, "allowSameNamespace": False}, "rollout": shadow}
                  ).objects["NetworkPolicy"]
    assert np["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8080}], "from": [
        {"podSelector": {"matchLabels": naming.selector_labels("ocr")}}]}]  # the serving pods copy pages to the held one


def test_the_service_monitor_needs_both_the_toggle_and_its_crd():
    on = {"monitoring": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    assert children().objects["ServiceMonitor"] is None
    assert children(on, servicemonitor_available=False).objects["ServiceMonitor"] is None
    sm = children(on).objects["ServiceMonitor"]
    assert sm["metadata"]["labels"]["release"] == "prom"
    assert sm["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]


def test_rendering_is_deterministic():
    assert children().objects == children().objects


def test_the_server_accepts_the_rendered_config_file_and_env(tmp_path):
    """Contract with ocr_server.runtime.config, which refuses unknown keys and bad values."""
    config = pytest.importorskip("ocr_server.runtime.config", reason="the server package is not installed in this venv")
    d = children({"inference": {"minVisualTokens": 544, "maxVisualTokens": 832, "batchSize": 4, "concurrency": 2,
                                "timeoutSeconds": 12, "maxNewTokens": 2048},
                  "model": {"path": "/opt/model", "revision": "v2"}, "service": {"port": 9000}})
    path = tmp_path / "config.yaml"
    path.write_text(d.objects["ConfigMap"]["data"]["config.yaml"])
    env = {e["name"]: e["value"] for e in container(d.objects["Deployment"])["env"] if "value" in e}
    assert env["CONFIG_FILE"] == "/etc/ocr/config.yaml"
    for loaded in (config.load_config(str(path), env={}), config.load_config(str(path), env=env)):
        assert (loaded.service.port, loaded.model.path, loaded.model.revision) == (9000, "/opt/model", "v2")
        assert (loaded.model.min_visual_tokens, loaded.model.max_visual_tokens) == (544, 832)
        assert (loaded.runtime.batch_size, loaded.runtime.concurrency, loaded.runtime.max_new_tokens) == (4, 2, 2048)
        assert loaded.runtime.timeout_sec == 12 and loaded.runtime.gpu_id == 0


def test_model_checksums_are_recorded_on_the_pods():
    sha = "a" * 64
    tpl = children({"model": {"checksums": {"model.safetensors": sha}}}).objects["Deployment"]["spec"]["template"]
    assert tpl["metadata"]["annotations"][D.CHECKSUMS_KEY] == '{"model.safetensors":"' + sha + '"}'


NIGHT = {"minReplicas": 2, "maxReplicas": 5, "schedules": [
    {"name": "nights", "start": "20:00", "end": "06:00", "minReplicas": 0}]}


def test_a_schedule_window_with_min_replicas_zero_removes_the_hpa_and_scales_the_deployment_to_zero():
    import datetime as dt
    d = children({"autoscaling": NIGHT}, now=dt.datetime(2026, 11, 30, 23, 0, tzinfo=dt.timezone.utc))
    assert d.objects["HorizontalPodAutoscaler"] is None
    assert d.objects["Deployment"]["spec"]["replicas"] == 0
    assert d.scaled_to_zero_by == "nights" and d.active_schedule == "nights"


def test_after_a_zero_window_the_hpa_is_back_and_the_deployment_at_least_at_its_minimum():
    import datetime as dt
    d = children({"replicas": 1, "autoscaling": NIGHT}, now=dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.timezone.utc))
    assert d.objects["HorizontalPodAutoscaler"]["spec"]["minReplicas"] == 2
    assert d.objects["Deployment"]["spec"]["replicas"] == 2
    assert d.scaled_to_zero_by is None


def test_model_checksums_go_beside_the_config_file_for_the_server_to_verify():
    from ocr_operator.ocrservice.render import configmap
    from ocr_server.runtime import checksums

    objs = children({"model": {"checksums": {"model.safetensors": "ab" * 32}}}).objects
    data = objs["ConfigMap"]["data"]
    assert configmap.CHECKSUMS_KEY == checksums.FILE_NAME
    assert yaml.safe_load(data[checksums.FILE_NAME]) == {"model.safetensors": "ab" * 32}
    assert checksums.FILE_NAME not in children().objects["ConfigMap"]["data"]


def test_the_operators_labels_win_over_user_labels_on_the_servicemonitor_and_prometheusrule():
    import dataclasses

    body = owner({"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}})
    spec = parsed(body)
    hijack = (("app.kubernetes.io/instance", "other"), ("app.kubernetes.io/managed-by", "someone"), ("release", "p"))
    # As if validation were bypassed (an older CRD without the rule): the watches must still see them.
    spec = dataclasses.replace(spec, service_monitor=dataclasses.replace(spec.service_monitor, labels=hijack),
                               prometheus_rule=dataclasses.replace(spec.prometheus_rule, labels=hijack))
    objs = render_all(body, spec).objects
    for kind in ("ServiceMonitor", "PrometheusRule"):
        labels = objs[kind]["metadata"]["labels"]
        assert {k: labels[k] for k in naming.labels("ocr")} == naming.labels("ocr"), kind
        assert labels["release"] == "p"


def pod_spec_of(spec=None):
    return children(spec).objects["Deployment"]["spec"]["template"]["spec"]


def test_the_grace_period_covers_the_prestop_sleep_and_the_servers_graceful_shutdown():
    pod = pod_spec_of({"inference": {"timeoutSeconds": 120}})
    assert pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"] == D.PRESTOP_SLEEP_SECONDS
    assert pod["terminationGracePeriodSeconds"] == D.PRESTOP_SLEEP_SECONDS + 120 + GRACEFUL_SHUTDOWN_MARGIN_SEC


def test_a_user_grace_period_longer_than_needed_is_kept():
    assert pod_spec_of({"terminationGracePeriodSeconds": 600})["terminationGracePeriodSeconds"] == 600
    assert pod_spec_of()["terminationGracePeriodSeconds"] == 60  # the default already covers 5 + 30 + 5


def test_a_grace_period_too_short_for_the_prestop_sleep_covers_the_shutdown_alone():
    pod = pod_spec_of({"terminationGracePeriodSeconds": 5, "inference": {"timeoutSeconds": 30}})
    assert "lifecycle" not in pod["containers"][0]
    assert pod["terminationGracePeriodSeconds"] == 30 + GRACEFUL_SHUTDOWN_MARGIN_SEC


def test_the_tmp_emptydir_has_a_size_limit():
    volumes = {v["name"]: v for v in pod_spec_of()["volumes"]}
    assert volumes["tmp"]["emptyDir"] == {"sizeLimit": D.TMP_SIZE_LIMIT}
    assert D.TMP_SIZE_LIMIT == "1Gi"


def test_golden_pages_on_the_model_pvc_are_a_golden_dir_inside_the_mounted_volume():
    """The operator mounts no PVC: the server sees the folder below cacheDir, where the model
    volume (with its subPath) is mounted, and serves it (GET /v1/golden)."""
    dep = children({"model": {"cacheDir": "/models", "pvc": {"claimName": "w", "subPath": "v2"}},
                    "rollout": {"qualityGate": {"goldenPages": {"pvcPath": "golden/set1"}}}}).objects["Deployment"]
    assert env_of(dep)["GOLDEN_DIR"] == {"name": "GOLDEN_DIR", "value": "/models/golden/set1"}
    (mount,) = [m for m in container(dep)["volumeMounts"] if m["name"] == "weights"]
    assert (mount["mountPath"], mount["subPath"]) == ("/models", "v2")


def test_golden_pages_in_a_configmap_set_no_golden_dir():
    dep = children({"model": {"pvc": {"claimName": "w"}},
                    "rollout": {"qualityGate": {"goldenPages": {"configMapName": "g"}}}}).objects["Deployment"]
    assert "GOLDEN_DIR" not in env_of(dep)
