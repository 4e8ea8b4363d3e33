"""OcrServiceSpec: the desired state of an OcrService, and the rules that read more than one part of it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from ocr_limits import default_max_visual_tokens

from ..fields import Constraints, Rule, api, model
from .network import Auth, Monitoring, NetworkPolicySpec, PdbSpec, PrometheusRuleSpec, ServiceMonitorSpec, ServiceSpec, TlsSpec
from .pods import (ANNOTATION_PREFIX, EnvVar, LocalObjectReference, Resources, Toleration, TopologySpreadConstraint,
                   reserved_labels_rule)
from .rollout import Rollout
from .scaling import DEFAULT_METRIC, Autoscaling
from .server import Inference, Model
from .tokens import token_rules

GOLDEN_PVC_ERROR = ("spec.rollout.qualityGate.goldenPages.pvcPath needs spec.model.pvc: the path is a folder inside "
                    "the model volume")


def _gate(s: Any) -> Any:
    return s.rollout.quality_gate


def _rules() -> tuple[Rule, ...]:
    return (
        Rule("!has(self.resources) || !has(self.resources.gpus) || self.resources.gpus > 0 || !has(self.autoscaling) "
             "|| (has(self.autoscaling.enabled) && !self.autoscaling.enabled) || (has(self.autoscaling.metric) && "
             f"has(self.autoscaling.metric.name) && self.autoscaling.metric.name != '{DEFAULT_METRIC}')",
             f"spec.autoscaling.metric.name {DEFAULT_METRIC} (the default metric of spec.autoscaling) needs "
             "spec.resources.gpus > 0: dcgm-exporter only reports pods that request a GPU; use another metric, a "
             "fixed spec.replicas without spec.autoscaling, or request a GPU", ".autoscaling.metric.name",
             lambda s: s.autoscaling is None or s.resources.gpus > 0 or s.autoscaling.metric.name != DEFAULT_METRIC),
        Rule("!has(self.rollout) || !has(self.rollout.qualityGate) || !has(self.rollout.qualityGate.goldenPages.pvcPath) "
             "|| (has(self.model) && has(self.model.pvc))", GOLDEN_PVC_ERROR, ".rollout.qualityGate.goldenPages.pvcPath",
             lambda s: _gate(s) is None or _gate(s).pvc_path is None or s.model.pvc is not None),
    ) + token_rules()


@model
class OcrServiceSpec:
    """Desired state of the OCR service."""

    __rules__ = _rules

    engine: str = api(
        "Inference engine of the server ({env}). transformers: the slots decoder (continuous batching in a slot KV "
        "cache, CUDA graphs on a GPU; spec.inference.decodeSlots), with transformers' generate as its reference. "
        "vllm: vLLM's async engine in the server process (continuous batching, paged attention; the image must be "
        "built with the vllm engine, Dockerfile.server's ENGINE build argument); spec.inference.batchSize is then "
        "vLLM's max_num_seqs. Both serve the same API and produce the same greedy tokens.", setting="ENGINE")
    image: str = api("Container image of the OCR server (ocr-server), e.g. "
                     "registry.example.com/causalflow/ocr-server:1.0.0.", min_length=1, max_length=512, required=True)
    image_pull_policy: str = api("When the kubelet pulls the image.", enum=("Always", "IfNotPresent", "Never"),
                                 default="IfNotPresent")
    image_pull_secrets: tuple[str, ...] = api("Secrets with registry credentials for the image.", max_items=16,
                                              via=(LocalObjectReference, "name"))
    model: Model = api("Which model the server loads and where its weights come from.", default={})
    inference: Inference = api("Inference settings passed to the server; rejected by the API server when out of "
                               "range.", default={})
    resources: Resources = api("Compute resources of each pod.", default={})
    node_selector: tuple[tuple[str, str], ...] = api(
        "Node labels the pods must match, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3.", max_properties=32)
    tolerations: tuple[Mapping[str, Any], ...] = api(
        "Tolerations of the pods (GPU nodes are often tainted nvidia.com/gpu=present:NoSchedule).", max_items=32,
        shape=Toleration)
    topology_spread_constraints: tuple[Mapping[str, Any], ...] = api(
        "How the pods spread over nodes or zones, e.g. {maxSkew: 1, topologyKey: kubernetes.io/hostname, "
        "whenUnsatisfiable: ScheduleAnyway}: replicas on different GPU nodes where there is room, so one node's loss "
        "takes one replica. A constraint without labelSelector counts this OcrService's pods, each revision apart.",
        max_items=8, shape=TopologySpreadConstraint)
    affinity: Mapping[str, Any] | None = api(
        "A core/v1 Affinity copied to the pods as is (kept free-form because its schema is the Kubernetes one; the "
        "API server validates it when the Deployment is applied).")
    priority_class_name: str | None = api("PriorityClass of the pods.", max_length=253)
    runtime_class_name: str | None = api(
        "RuntimeClass of the pods, e.g. nvidia on clusters where the NVIDIA container runtime is a RuntimeClass rather "
        "than the nodes' default (as the NVIDIA GPU Operator sets it up). One that does not exist makes the API server "
        "refuse the pods: the revision fails with FailedCreate.", max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    service_account_name: str | None = api("ServiceAccount the pods run as (default the namespace's default "
                                           "account).", max_length=253)
    termination_grace_period_seconds: int = api("Seconds a pod gets to finish in-flight requests after SIGTERM.",
                                                minimum=0, maximum=3600, default=60)
    pod_labels: tuple[tuple[str, str], ...] = api(
        "Extra labels on every pod (changing them rolls the pods). The app.kubernetes.io/* and ocr.causalflow.dev/* "
        "keys are reserved.", max_properties=64, item=Constraints(max_length=63),
        rules=(reserved_labels_rule("spec.podLabels"),))
    pod_annotations: tuple[tuple[str, str], ...] = api(
        "Extra annotations on every pod (changing them rolls the pods).", max_properties=64,
        rules=(Rule(f"self.all(k, !k.startsWith('{ANNOTATION_PREFIX}'))",
                    f"spec.podAnnotations must not use the reserved prefix {ANNOTATION_PREFIX}",
                    holds=lambda notes: not any(k.startswith(ANNOTATION_PREFIX) for k, _ in notes)),))
    env: tuple[Mapping[str, Any], ...] = api(
        "Extra environment variables of the server container. A setting the OcrService has a field for (ENGINE, "
        "MODEL_NAME, PORT, INPUT_SIZE, MAX_VISUAL_TOKENS, BATCH_SIZE, ...) cannot be set here, nor CONFIG_FILE, "
        "API_KEYS or API_KEYS_FILE (keys come from spec.auth), nor GOLDEN_DIR (goldenPages.pvcPath); the message "
        "names the field to set instead.", max_items=64, shape=EnvVar, list_map_keys=("name",))
    replicas: int = api(
        "Number of pods. Without spec.autoscaling (or with spec.autoscaling.enabled false) a fixed size that `kubectl "
        "scale` changes. With autoscaling on, the HorizontalPodAutoscaler's choice: it scales the OcrService through "
        "its scale subresource and writes this field, the operator keeps the Deployment at it within [minReplicas, "
        "maxReplicas], and the admission policy shipped with this CRD refuses anyone else's change while autoscaling "
        "is on (edit spec.autoscaling.minReplicas/maxReplicas instead). Set at creation, it is the starting size.",
        minimum=0, maximum=1000, default=1)
    # None: no autoscaler (absent, or enabled: false).
    autoscaling: Autoscaling | None = api(
        "A HorizontalPodAutoscaler (autoscaling/v2) on GPU utilisation, on when this field is set (`autoscaling: {}` "
        "takes every default) unless enabled is false. The HPA targets the OcrService's scale subresource, so "
        "`kubectl get --raw .../ocrservices/NAME/scale` shows its choice in spec.replicas.")
    rollout: Rollout = api("How upgrades roll out and when they are rolled back.", default={})
    service: ServiceSpec = api("The Service in front of the pods.", default={})
    auth: Auth | None = api(
        "Require an API key. The keys come from a Secret, mounted as a file (API_KEYS_FILE; one key per line or "
        "comma-separated, 8+ characters each) that the server re-reads when the Secret changes, so keys rotate "
        "without a restart.")
    tls_secret_name: str | None = api(json="tls", via=(TlsSpec, "secret_name"))
    network_policy: NetworkPolicySpec = api("A NetworkPolicy that admits traffic to the server port only from the "
                                            "listed sources.", default={})
    pdb: PdbSpec = api("A PodDisruptionBudget, created when more than one pod can exist.", json="podDisruptionBudget",
                       default={})
    service_monitor: ServiceMonitorSpec = api(json="monitoring", via=(Monitoring, "service_monitor"), default={})
    prometheus_rule: PrometheusRuleSpec = api(json="monitoring", via=(Monitoring, "prometheus_rule"), default={})

    def __post_init__(self) -> None:
        """An unset spec.inference.maxVisualTokens is the engine's default, so that choosing the
        engine alone works (the CRD cannot default one field from another); a disabled
        autoscaling section is no autoscaler."""
        if self.inference.max_visual_tokens is None:
            cap = default_max_visual_tokens(self.engine)
            object.__setattr__(self, "inference", replace(self.inference, max_visual_tokens=cap))
        if self.autoscaling is not None and not self.autoscaling.enabled:
            object.__setattr__(self, "autoscaling", None)

    def deployment_replicas(self, min_replicas: int | None = None) -> int:
        """The Deployment's size: spec.replicas, which with autoscaling on is the HPA's choice
        (it targets the OcrService's scale subresource), kept within [min_replicas, maxReplicas]
        so a new minimum (a schedule window, an edited spec) holds before the HPA's next sync."""
        a = self.autoscaling
        if a is None:
            return self.replicas
        floor = a.min_replicas if min_replicas is None else min_replicas
        return max(floor, min(self.replicas, a.max_replicas))

    @property
    def max_pods(self) -> int:
        """Most pods that can exist in steady state (decides whether a PDB makes sense)."""
        if self.autoscaling is not None:
            return self.autoscaling.max_replicas
        return self.replicas
