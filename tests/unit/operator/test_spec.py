"""Spec defaulting and validation, and the CRD schema defaults they must agree with."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import pytest
import yaml

from ocr_operator.api.ocrservice import FIELD_FOR_ENV
from ocr_operator import spec as S

CRD = Path(__file__).resolve().parents[3] / "crds" / "ocr.causalflow.dev_ocrservices.yaml"


@functools.cache
def schema() -> dict:
    """The CRD's spec schema, read once per process (each parse of the generated CRD is 0.4 CPU s,
    and 20 tests read it). Callers only read it."""
    crd = yaml.safe_load(CRD.read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def default_of(*path: str):
    node = schema()
    for key in path:
        node = node["properties"][key]
    return node.get("default")


@pytest.mark.parametrize("path, value", [
    (("imagePullPolicy",), lambda s: s.image_pull_policy),
    (("model", "name"), lambda s: s.model.name),
    (("model", "cacheDir"), lambda s: s.model.cache_dir),
    (("inference", "inputSize"), lambda s: s.inference.input_size),
    (("inference", "baseSize"), lambda s: s.inference.base_size),
    (("inference", "minVisualTokens"), lambda s: s.inference.min_visual_tokens),
    (("inference", "concurrency"), lambda s: s.inference.concurrency),
    (("inference", "batchSize"), lambda s: s.inference.batch_size),
    (("inference", "timeoutSeconds"), lambda s: s.inference.timeout_seconds),
    (("inference", "maxNewTokens"), lambda s: s.inference.max_new_tokens),
    (("resources", "gpus"), lambda s: s.resources.gpus),
    (("resources", "gpuResourceName"), lambda s: s.resources.gpu_resource_name),
    (("resources", "cpu"), lambda s: s.resources.cpu),
    (("resources", "memory"), lambda s: s.resources.memory),
    (("terminationGracePeriodSeconds",), lambda s: s.termination_grace_period_seconds),
    (("replicas",), lambda s: s.replicas),
    (("autoscaling", "minReplicas"), lambda s: s.autoscaling.min_replicas),
    (("autoscaling", "maxReplicas"), lambda s: s.autoscaling.max_replicas),
    (("autoscaling", "targetGPUUtilization"), lambda s: s.autoscaling.target_gpu_utilization),
    (("rollout", "modelLoadTimeoutSeconds"), lambda s: s.rollout.model_load_timeout_seconds),
    (("rollout", "progressDeadlineSeconds"), lambda s: s.rollout.progress_deadline_seconds),
    (("rollout", "autoRollback"), lambda s: s.rollout.auto_rollback),
    (("rollout", "maxSurge"), lambda s: s.rollout.max_surge),
    (("rollout", "maxUnavailable"), lambda s: s.rollout.max_unavailable),
    (("rollout", "settleSeconds"), lambda s: s.rollout.settle_seconds),
    (("rollout", "maxRestarts"), lambda s: s.rollout.max_restarts),
    (("rollout", "unschedulableGraceSeconds"), lambda s: s.rollout.unschedulable_grace_seconds),
    (("rollout", "revisionHistoryLimit"), lambda s: s.rollout.revision_history_limit),
    (("rollout", "healthCheck", "path"), lambda s: s.rollout.health_check.path),
    (("rollout", "healthCheck", "livenessPath"), lambda s: s.rollout.health_check.liveness_path),
    (("rollout", "healthCheck", "periodSeconds"), lambda s: s.rollout.health_check.period_seconds),
    (("rollout", "healthCheck", "timeoutSeconds"), lambda s: s.rollout.health_check.timeout_seconds),
    (("rollout", "healthCheck", "failureThreshold"), lambda s: s.rollout.health_check.failure_threshold),
    (("service", "type"), lambda s: s.service.type),
    (("service", "port"), lambda s: s.service.port),
    (("networkPolicy", "enabled"), lambda s: s.network_policy.enabled),
    (("podDisruptionBudget", "enabled"), lambda s: s.pdb.enabled),
    (("podDisruptionBudget", "maxUnavailable"), lambda s: s.pdb.max_unavailable),
])
def test_python_default_equals_the_crd_schema_default(path, value):
    parsed = S.parse({"image": "img", "autoscaling": {}})
    assert value(parsed) == default_of(*path), f"spec.{'.'.join(path)}"


def test_metric_default_is_the_dcgm_gpu_utilisation():
    assert S.parse({"image": "img", "autoscaling": {}}).autoscaling.metric.name == "DCGM_FI_DEV_GPU_UTIL" == default_of(
        "autoscaling", "metric", "name")


def test_a_minimal_spec_runs_one_pod_without_an_autoscaler():
    s = S.parse({"image": "img"})
    assert s.autoscaling is None
    assert s.deployment_replicas() == 1


def test_an_empty_autoscaling_section_autoscales_with_the_defaults():
    s = S.parse({"image": "img", "autoscaling": {}})
    assert (s.autoscaling.min_replicas, s.autoscaling.max_replicas) == (1, 3)


def test_a_replicas_spec_has_no_autoscaler_and_a_fixed_size():
    s = S.parse({"image": "img", "replicas": 2})
    assert s.autoscaling is None
    assert s.deployment_replicas() == 2


def test_autoscaling_disabled_falls_back_to_replicas_or_one():
    assert S.parse({"image": "img", "autoscaling": {"enabled": False}}).deployment_replicas() == 1
    assert S.parse({"image": "img", "replicas": 4, "autoscaling": {"enabled": False}}).deployment_replicas() == 4


def test_with_autoscaling_replicas_is_the_hpas_choice_kept_within_min_and_max():
    def size(replicas, floor=None):
        return S.parse({"image": "img", "replicas": replicas,
                        "autoscaling": {"minReplicas": 2, "maxReplicas": 5}}).deployment_replicas(floor)
    assert [size(1), size(3), size(9)] == [2, 3, 5]
    assert size(3, floor=4) == 4  # a schedule window's minimum holds before the HPA's next sync


@pytest.mark.parametrize("spec, field", [
    ({"inference": {"maxVisualTokens": 1200}}, "spec.inference.maxVisualTokens"),
    ({"inference": {"minVisualTokens": 100}}, "spec.inference.minVisualTokens"),
    ({"inference": {"minVisualTokens": 900, "maxVisualTokens": 500}}, "spec.inference.minVisualTokens"),
    ({"inference": {"inputSize": 640}}, "spec.inference.inputSize"),
    ({"inference": {"minVisualTokens": 600, "maxVisualTokens": 650}}, "spec.inference.minVisualTokens needs more crops"),
    ({"inference": {"batchSize": 128}}, "spec.inference.batchSize"),
    ({"inference": {"maxNewTokens": 10000}}, "spec.inference.maxNewTokens"),
    ({"inference": {"inputSize": 1024, "baseSize": 768}}, "spec.inference.inputSize"),
    ({"replicas": -1}, "spec.replicas"),
    ({"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling.minReplicas"),
    ({"resources": {"gpus": -1}}, "spec.resources.gpus"),
    ({"resources": {"gpus": 2}}, "spec.resources.gpus must be 0 or 1"),
    ({"rollout": {"healthCheck": {"periodSeconds": 0}}}, "spec.rollout.healthCheck.periodSeconds"),
    ({"rollout": {"modelLoadTimeoutSeconds": 600, "progressDeadlineSeconds": 300}}, "spec.rollout.progressDeadlineSeconds"),
    ({"inference": {"batchSize": "eight"}}, "spec.inference.batchSize"),
    ({"model": {"pvc": {"claimName": "w"}, "path": "/w"}}, "spec.model.pvc"),
    ({"inference": {"concurrency": 257}}, "spec.inference.concurrency"),
    ({"inference": {"timeoutSeconds": 3601}}, "spec.inference.timeoutSeconds"),
    ({"service": {"port": 70000}}, "spec.service.port"),
    ({"engine": "tensorrt"}, "spec.engine"),
    ({"engine": "vllm", "inference": {"maxVisualTokens": 1024}}, "spec.engine vllm"),
    ({"engine": "vllm", "inference": {"minVisualTokens": 545}}, "spec.engine vllm"),
    ({"inference": {"minVisualTokens": 1100}}, "spec.inference.minVisualTokens must be <="),
])
def test_an_invalid_spec_is_rejected_naming_the_field(spec, field):
    with pytest.raises(S.SpecError) as err:
        S.parse({"image": "img", **spec})
    assert field in str(err.value)


def test_an_unset_token_cap_is_the_engines_default():
    assert S.parse({"image": "img"}).inference.max_visual_tokens == 1024
    assert S.parse({"image": "img", "engine": "transformers"}).inference.max_visual_tokens == 1024
    assert S.parse({"image": "img", "engine": "vllm"}).inference.max_visual_tokens == 1120


def test_choosing_the_vllm_engine_alone_is_a_valid_spec():
    s = S.parse({"image": "img", "engine": "vllm", "inference": {"concurrency": 64}})
    assert (s.engine, s.inference.max_visual_tokens, s.inference.min_visual_tokens) == ("vllm", 1120, 256)


def test_a_token_cap_that_is_set_is_kept_whatever_the_engine():
    assert S.parse({"image": "img", "inference": {"maxVisualTokens": 1120}}).inference.max_visual_tokens == 1120
    assert S.parse({"image": "img", "inference": {"maxVisualTokens": 544}}).inference.max_visual_tokens == 544


def test_a_spec_built_in_code_gets_the_engines_token_cap_too():
    assert S.OcrServiceSpec(image="img", engine="vllm").inference.max_visual_tokens == 1120


@pytest.mark.parametrize("name", sorted(FIELD_FOR_ENV))
def test_spec_env_may_not_set_a_setting_the_ocrservice_has_a_field_for(name):
    with pytest.raises(S.SpecError) as err:
        S.parse({"image": "img", "env": [{"name": "LOG_LEVEL", "value": "debug"}, {"name": name, "value": "1"}]})
    assert f"spec.env must not set {name}: set {FIELD_FOR_ENV[name]} instead" in str(err.value)


def test_the_env_names_spec_env_may_not_set_map_to_the_fields_that_set_them():
    assert FIELD_FOR_ENV["ENGINE"] == "spec.engine"
    assert FIELD_FOR_ENV["MAX_VISUAL_TOKENS"] == "spec.inference.maxVisualTokens"
    assert FIELD_FOR_ENV["TLS_KEY_FILE"] == "spec.tls.secretName"
    assert FIELD_FOR_ENV["GOLDEN_DIR"] == "spec.rollout.qualityGate.goldenPages.pvcPath"
    assert all(f.startswith("spec.") for f in FIELD_FOR_ENV.values())


def test_spec_env_may_set_a_variable_the_ocrservice_has_no_field_for():
    env = [{"name": "LOG_LEVEL", "value": "debug"}, {"name": "HF_HUB_OFFLINE", "value": "0"}]
    assert S.parse({"image": "img", "env": env}).env == tuple(env)


def test_a_missing_image_is_rejected():
    with pytest.raises(S.SpecError, match="spec.image"):
        S.parse({})


def _at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


def test_a_schedule_window_raises_min_replicas_while_open():
    s = S.parse({"image": "img", "autoscaling": {"minReplicas": 1, "maxReplicas": 6, "schedules": [
        {"name": "peak", "days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "start": "08:00", "end": "18:00",
         "minReplicas": 4, "timeZone": "UTC"}]}})
    assert s.autoscaling.effective_min_replicas(_at("2026-11-30T09:00:00+00:00")) == (4, "peak")  # Monday
    assert s.autoscaling.effective_min_replicas(_at("2026-11-30T18:00:00+00:00")) == (1, None)
    assert s.autoscaling.effective_min_replicas(_at("2026-11-29T09:00:00+00:00")) == (1, None)  # Sunday


def test_a_window_across_midnight_belongs_to_the_day_it_started():
    w = S.Schedule(name="night", start="22:00", end="06:00", min_replicas=1, days=("Fri",))
    assert w.is_open(_at("2026-11-27T23:00:00+00:00"))  # Friday night
    assert w.is_open(_at("2026-11-28T05:59:00+00:00"))  # Saturday early morning, Friday's window
    assert not w.is_open(_at("2026-11-29T05:00:00+00:00"))  # Sunday early morning


def test_a_window_is_read_in_its_own_time_zone():
    w = S.Schedule(name="berlin", start="08:00", end="09:00", min_replicas=2, time_zone="Europe/Berlin")
    assert w.is_open(_at("2026-11-30T07:30:00+00:00"))  # 08:30 in Berlin (UTC+1)
    assert not w.is_open(_at("2026-11-30T08:30:00+00:00"))


def test_max_pods_counts_the_autoscaler_maximum_or_the_fixed_size():
    assert S.parse({"image": "img", "autoscaling": {"maxReplicas": 5}}).max_pods == 5
    assert S.parse({"image": "img", "replicas": 1}).max_pods == 1


def test_a_cpu_only_service_cannot_autoscale_on_the_gpu_metric():
    with pytest.raises(S.SpecError, match="spec.autoscaling.metric.name"):
        S.parse({"image": "img", "resources": {"gpus": 0}, "autoscaling": {}})
    assert S.parse({"image": "img", "resources": {"gpus": 0}}).autoscaling is None
    assert S.parse({"image": "img", "resources": {"gpus": 0},
                    "autoscaling": {"metric": {"name": "ocr_queue_depth", "targetAverageValue": "4"}}}).autoscaling


@pytest.mark.parametrize("metric, target", [
    ("DCGM_FI_DEV_GPU_UTIL", "70"),            # dcgm-exporter reports percent
    ("ocr_gpu_utilization_ratio", "700m"),     # the server's gauge is 0..1
    ("ocr_queue_depth", "70"),
])
def test_hpa_target_without_a_metric_target_is_target_gpu_utilization_in_the_metric_unit(metric, target):
    spec = S.parse({"image": "img", "autoscaling": {"targetGPUUtilization": 70, "metric": {"name": metric}}})
    assert spec.autoscaling.target_value() == target


def test_a_metric_target_average_value_wins():
    spec = S.parse({"image": "img", "autoscaling": {"metric": {"name": "ocr_gpu_utilization_ratio",
                                                               "targetAverageValue": "500m"}}})
    assert spec.autoscaling.target_value() == "500m"


GATE_SPEC = {"image": "img", "rollout": {"qualityGate": {"goldenPages": {"configMapName": "golden"}}}}


@pytest.mark.parametrize("field, attr", [("maxMeanDistance", "max_mean_distance"), ("maxPageDistance", "max_page_distance"),
                                         ("maxNewTokens", "max_new_tokens"), ("timeoutSeconds", "timeout_seconds")])
def test_quality_gate_defaults_equal_the_crd_schema_defaults(field, attr):
    assert getattr(S.parse(GATE_SPEC).rollout.quality_gate, attr) == default_of("rollout", "qualityGate", field)


def test_no_quality_gate_section_means_no_gate():
    assert S.parse({"image": "img"}).rollout.quality_gate is None


def test_a_quality_gate_with_api_keys_is_accepted():
    spec = S.parse({**GATE_SPEC, "auth": {"secretName": "keys"}})
    assert spec.auth is not None and spec.rollout.quality_gate is not None


def test_a_quality_gate_threshold_out_of_range_is_refused_naming_the_field():
    bad = {"image": "img", "rollout": {"qualityGate": {"goldenPages": {"configMapName": "g"}, "maxPageDistance": 1.5}}}
    with pytest.raises(S.SpecError, match=r"spec.rollout.qualityGate.maxPageDistance must be within 0..1, got 1.5"):
        S.parse(bad)


PVC_GATE_SPEC = {"image": "img", "model": {"pvc": {"claimName": "weights", "subPath": "models"}},
                 "rollout": {"qualityGate": {"goldenPages": {"pvcPath": "golden/v1"}}}}


def test_golden_pages_on_the_model_pvc_are_parsed_as_a_pvc_path():
    gate = S.parse(PVC_GATE_SPEC).rollout.quality_gate
    assert (gate.config_map, gate.pvc_path) == (None, "golden/v1")


@pytest.mark.parametrize("pages", [{}, {"configMapName": "g", "pvcPath": "golden"}])
def test_golden_pages_need_exactly_one_of_configmap_and_pvc_path(pages):
    with pytest.raises(S.SpecError, match="set exactly one of configMapName .* and pvcPath"):
        S.parse({**PVC_GATE_SPEC, "rollout": {"qualityGate": {"goldenPages": pages}}})


def test_a_pvc_path_without_a_model_pvc_is_refused_naming_the_field():
    with pytest.raises(S.SpecError, match="spec.rollout.qualityGate.goldenPages.pvcPath needs spec.model.pvc"):
        S.parse({**PVC_GATE_SPEC, "model": {}})


@pytest.mark.parametrize("path", ["/abs", "../up", "a/../b", "a//b", "a/", ".hidden", "a/./b", "x" * 257])
def test_a_pvc_path_outside_the_volume_or_too_long_is_refused(path):
    with pytest.raises(S.SpecError, match="spec.rollout.qualityGate.goldenPages.pvcPath"):
        S.parse({**PVC_GATE_SPEC, "rollout": {"qualityGate": {"goldenPages": {"pvcPath": path}}}})


def test_the_pvc_path_rules_match_the_crd_schema():
    node = schema()["properties"]["rollout"]["properties"]["qualityGate"]["properties"]["goldenPages"]
    rules = [r["message"] for r in node["x-kubernetes-validations"]]
    top = [r["message"] for r in schema()["x-kubernetes-validations"]]
    assert S.GOLDEN_SOURCE_ERROR in rules and S.GOLDEN_PVC_ERROR in top
    assert "required" not in node


@pytest.mark.parametrize("rollout, message", [
    ({"maxSurge": 0}, "spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0"),
    ({"maxSurge": "00%", "maxUnavailable": "0%"}, "cannot both be 0"),
    ({"maxSurge": -1}, "spec.rollout.maxSurge must be >= 0"),
    ({"maxSurge": "a third"}, "spec.rollout.maxSurge 'a third' does not match"),
    ({"maxUnavailable": "101%"}, "spec.rollout.maxUnavailable '101%' does not match"),
])
def test_a_rolling_update_that_kubernetes_would_refuse_is_rejected_naming_the_field(rollout, message):
    with pytest.raises(S.SpecError, match=message):
        S.parse({"image": "img", "rollout": rollout})


def test_a_rollout_may_stop_an_old_pod_first_or_surge_by_a_percentage():
    assert S.parse({"image": "img", "rollout": {"maxSurge": 0, "maxUnavailable": "25%"}}).rollout.max_unavailable == "25%"
    assert S.parse({"image": "img", "rollout": {"maxSurge": "150%"}}).rollout.max_surge == "150%"
