"""The API server itself rejects invalid OcrServices, with a message naming the field.

No operator runs here: these are the CRD's schema, enums, ranges and CEL rules at work.
"""

from __future__ import annotations

import copy
import uuid

import pytest
import yaml

from tests.e2e.operator_fixtures import ocrservice
from localcluster.waiting import wait_for

pytestmark = pytest.mark.e2e

INVALID = [
    ("visual tokens above 1120", {"inference": {"maxVisualTokens": 2000}}, "spec.inference.maxVisualTokens"),
    ("visual tokens below 256", {"inference": {"minVisualTokens": 100}}, "spec.inference.minVisualTokens"),
    ("min visual tokens above max", {"inference": {"minVisualTokens": 900, "maxVisualTokens": 500}},
     "spec.inference.minVisualTokens must be <= spec.inference.maxVisualTokens"),
    ("a token floor the ceiling cannot reach", {"inference": {"minVisualTokens": 600, "maxVisualTokens": 650}},
     "spec.inference.minVisualTokens needs more crops than spec.inference.maxVisualTokens allows"),
    ("a batch larger than the server takes", {"inference": {"batchSize": 128}}, "spec.inference.batchSize"),
    ("a spread that is neither DoNotSchedule nor ScheduleAnyway",
     {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                     "whenUnsatisfiable": "Sometimes"}]},
     "spec.topologySpreadConstraints[0].whenUnsatisfiable"),
    ("more decode slots than the server takes", {"inference": {"decodeSlots": 2048}}, "spec.inference.decodeSlots"),
    ("DECODE_SLOTS in env", {"env": [{"name": "DECODE_SLOTS", "value": "16"}]},
     "spec.env must not set DECODE_SLOTS: set spec.inference.decodeSlots instead"),
    ("a crop size the model has no queries for", {"inference": {"inputSize": 640}}, "spec.inference.inputSize"),
    ("autoscaling min above max", {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
     "spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas"),
    ("negative GPU count", {"resources": {"gpus": -1}}, "spec.resources.gpus"),
    ("two GPUs for a server that drives one", {"resources": {"gpus": 2}},
     "spec.resources.gpus must be 0 or 1: the server drives one GPU per pod"),
    ("negative replicas", {"replicas": -1}, "spec.replicas"),
    ("unknown field", {"replica": 2}, 'unknown field "spec.replica"'),
    ("wrong type", {"inference": {"batchSize": "eight"}}, "spec.inference.batchSize"),
    ("zero health-check period", {"rollout": {"healthCheck": {"periodSeconds": 0}}},
     "spec.rollout.healthCheck.periodSeconds"),
    ("zero failure threshold", {"rollout": {"healthCheck": {"failureThreshold": 0}}},
     "spec.rollout.healthCheck.failureThreshold"),
    ("progress deadline shorter than the model load", {"rollout": {"modelLoadTimeoutSeconds": 600,
                                                                   "progressDeadlineSeconds": 300}},
     "spec.rollout.progressDeadlineSeconds must be greater than spec.rollout.modelLoadTimeoutSeconds"),
    ("unknown pull policy", {"imagePullPolicy": "Sometimes"}, "spec.imagePullPolicy"),
    ("a rollout that can neither add nor stop a pod", {"rollout": {"maxSurge": "0%", "maxUnavailable": 0}},
     "spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0"),
    ("a surge that is no count", {"rollout": {"maxSurge": "two"}}, "spec.rollout.maxSurge"),
    ("a negative surge", {"rollout": {"maxSurge": -1}}, "spec.rollout.maxSurge"),
    ("more unavailable than all", {"rollout": {"maxUnavailable": "150%"}}, "spec.rollout.maxUnavailable"),
    ("a disruption budget that is no count", {"podDisruptionBudget": {"maxUnavailable": "1 pod"}},
     "spec.podDisruptionBudget.maxUnavailable"),
    ("reserved pod label", {"podLabels": {"app.kubernetes.io/instance": "other"}}, "spec.podLabels"),
    ("reserved servicemonitor label", {"monitoring": {"serviceMonitor": {"labels": {
        "app.kubernetes.io/managed-by": "someone"}}}}, "spec.monitoring.serviceMonitor.labels"),
    ("reserved prometheusrule label", {"monitoring": {"prometheusRule": {"labels": {
        "app.kubernetes.io/instance": "other"}}}}, "spec.monitoring.prometheusRule.labels"),
    ("weights from a PVC and an image path at once", {"model": {"pvc": {"claimName": "w"}, "path": "/w"}},
     "spec.model.pvc and spec.model.path are mutually exclusive"),
    ("not a CIDR", {"networkPolicy": {"enabled": True, "allowedCIDRs": ["10.0.0.300/8"]}},
     "spec.networkPolicy.allowedCIDRs"),
    ("schedule time out of range", {"autoscaling": {"schedules": [{"name": "x", "start": "25:00", "end": "06:00",
                                                                     "minReplicas": 1}]}},
     "spec.autoscaling.schedules[0].start"),
    ("GPU metric without a GPU", {"resources": {"gpus": 0}, "autoscaling": {}}, "spec.autoscaling.metric.name"),
    ("queue target twice", {"autoscaling": {"targetQueueDepth": 4, "metric": {"name": "ocr_queue_depth"}}},
     "spec.autoscaling.targetQueueDepth"),
    ("queue target not a quantity", {"autoscaling": {"targetQueueDepth": "four"}}, "spec.autoscaling.targetQueueDepth"),
    ("API_KEYS in env with auth", {"auth": {"secretName": "k"}, "env": [{"name": "API_KEYS", "value": "x"}]},
     "spec.env must not set API_KEYS"),
    ("a setting the OcrService has a field for, in env", {"env": [{"name": "MAX_VISUAL_TOKENS", "value": "800"}]},
     "spec.env must not set MAX_VISUAL_TOKENS: set spec.inference.maxVisualTokens instead"),
    ("vllm with a token cap it cannot apply", {"engine": "vllm", "inference": {"maxVisualTokens": 1024}},
     "spec.engine vllm needs spec.inference.maxVisualTokens 1120"),
    ("golden pages in a ConfigMap and on the PVC at once", {"model": {"pvc": {"claimName": "w"}}, "rollout": {
        "qualityGate": {"goldenPages": {"configMapName": "g", "pvcPath": "golden"}}}},
     "spec.rollout.qualityGate.goldenPages: set exactly one of configMapName"),
    ("golden pages from nowhere", {"rollout": {"qualityGate": {"goldenPages": {}}}},
     "spec.rollout.qualityGate.goldenPages: set exactly one of configMapName"),
    ("golden pages on the PVC without a model PVC", {"rollout": {"qualityGate": {"goldenPages": {"pvcPath": "golden"}}}},
     "spec.rollout.qualityGate.goldenPages.pvcPath needs spec.model.pvc"),
    ("GOLDEN_DIR in env", {"env": [{"name": "GOLDEN_DIR", "value": "/elsewhere"}]},
     "spec.env must not set GOLDEN_DIR: set spec.rollout.qualityGate.goldenPages.pvcPath instead"),
    ("a golden pages path out of the volume", {"model": {"pvc": {"claimName": "w"}}, "rollout": {
        "qualityGate": {"goldenPages": {"pvcPath": "../secrets"}}}}, "spec.rollout.qualityGate.goldenPages.pvcPath"),
    *[(f"shadow {field} {value}", {"rollout": {"qualityGate": {"goldenPages": {"configMapName": "g"},
                                                                "shadow": {field: value}}}},
       f"spec.rollout.qualityGate.shadow.{field}")
      for field, value in (("samplePercent", 0), ("samplePercent", 101), ("maxPages", 0), ("maxPages", 257),
                           ("maxSeconds", 9), ("maxSeconds", 3601), ("noisePages", -1), ("noisePages", 9),
                           ("maxMeanDistance", 1.5), ("maxPageDistance", -0.1))],
]


@pytest.fixture(scope="module")
def validation_ns(cluster, ocr_crd):
    name = f"t-validation-{uuid.uuid4().hex[:5]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def manifest(name: str, spec: dict) -> dict:
    m = ocrservice(name)
    for key, value in spec.items():
        m["spec"][key] = copy.deepcopy(value)
    return m


@pytest.mark.parametrize("what, spec, field", INVALID, ids=[i[0].replace(" ", "-") for i in INVALID])
def test_the_api_server_rejects_an_invalid_ocrservice_naming_the_field(cluster, validation_ns, what, spec, field):
    name = f"bad-{uuid.uuid4().hex[:6]}"
    proc = cluster.kubectl("apply", "-n", validation_ns, "-f", "-", input=yaml.safe_dump(manifest(name, spec)),
                           check=False)
    assert proc.returncode != 0, f"{what}: accepted, but should be rejected"
    assert field in proc.stderr, f"{what}: message does not name {field!r}: {proc.stderr}"
    assert cluster.kubectl("get", "ocrs", name, "-n", validation_ns, check=False).returncode != 0


def test_a_valid_manifest_is_accepted_and_defaulted_by_the_api_server(cluster, validation_ns):
    cluster.kubectl("apply", "-n", validation_ns, "-f", "-",
                    input=yaml.safe_dump({"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService",
                                          "metadata": {"name": "good"}, "spec": {"image": "img:1"}}))
    obj = wait_for(lambda: yaml.safe_load(cluster.kubectl("get", "ocrs", "good", "-n", validation_ns, "-o", "yaml").stdout),
                   timeout=10, message="the OcrService")
    spec = obj["spec"]
    assert spec["engine"] == "transformers" and spec["inference"]["minVisualTokens"] == 256
    assert spec["inference"]["decodeSlots"] == 0  # the server's choice
    assert "maxVisualTokens" not in spec["inference"]  # it follows the engine: the operator fills it in
    assert spec["model"]["name"] == "deepseek-ai/DeepSeek-OCR-2"
    assert spec["rollout"]["healthCheck"]["failureThreshold"] == 5
    assert (spec["rollout"]["maxSurge"], spec["rollout"]["maxUnavailable"]) == (1, 0)  # old pods serve throughout
    assert spec["resources"]["gpus"] == 1
    assert spec["replicas"] == 1 and "autoscaling" not in spec  # one pod, no HPA, unless asked


def test_an_empty_shadow_sample_is_defaulted_by_the_api_server(cluster, validation_ns):
    body = ocrservice("shadowed", rollout={"qualityGate": {"goldenPages": {"configMapName": "g"}, "shadow": {}}})
    cluster.kubectl("apply", "-n", validation_ns, "-f", "-", input=yaml.safe_dump(body))
    obj = yaml.safe_load(cluster.kubectl("get", "ocrs", "shadowed", "-n", validation_ns, "-o", "yaml").stdout)
    assert obj["spec"]["rollout"]["qualityGate"]["shadow"] == {
        "samplePercent": 10, "maxPages": 32, "maxSeconds": 300, "noisePages": 2}  # thresholds: the gate's own


def test_kubectl_explain_documents_the_fields(cluster, ocr_crd):
    out = cluster.kubectl("explain", "ocrs.spec.inference.maxVisualTokens").stdout
    assert "MAX_VISUAL_TOKENS" in out and "256..1120" in out
