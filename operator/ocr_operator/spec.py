"""OcrService custom resource -> typed, defaulted, frozen spec.

The API server already applies the CRD's schema defaults; this module applies the same defaults
once more so that a spec coming from anywhere (a unit test, an old object stored before a default
was added) reads the same. `tests/unit/operator/test_spec.py` checks that every default here equals
the CRD schema's default, so the two cannot drift apart. The defaults and bounds shared with the
server come from ocr_limits (hack/gen-crd.py writes them into the CRD). One default depends on
another field and so is not in the schema: spec.inference.maxVisualTokens follows spec.engine.

Cross-field rules live in the CRD as CEL. `validate()` repeats them as plain Python for objects
that never went through the API server (and for a clear error in the operator log); the messages
of the rules hack/gen-crd.py writes are the ones below, so both say the same.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping
from zoneinfo import ZoneInfo

from ocr_limits import quality as gate_limits

from ocr_limits import (
    CROP_TOKENS,
    DEFAULT_CACHE_DIR,
    DEFAULT_ENGINE,
    DEFAULT_MODEL_NAME,
    DEFAULT_PORT,
    ENGINES,
    FIELD_FOR_ENV,
    GLOBAL_TOKENS,
    MAX_CROPS,
    MIN_CROPS,
    TOKEN_STEPS,
    EngineLimits,
    Setting,
    default_max_visual_tokens,
    engine_limits,
    setting,
    token_budget_fits,
)

GROUP = "ocr.causalflow.dev"
VERSION = "v1alpha1"
KIND = "OcrService"
PLURAL = "ocrservices"
API_VERSION = f"{GROUP}/{VERSION}"

DEFAULT_METRIC = "DCGM_FI_DEV_GPU_UTIL"
RATIO_GPU_METRIC = "ocr_gpu_utilization_ratio"  # the server's own GPU gauge, 0..1 (ocr_server.metrics)
QUEUE_METRIC = "ocr_queue_depth"  # the server's own per-pod queue gauge (ocr_server.metrics)
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


class SpecError(ValueError):
    """A spec the operator cannot render; the message names the field."""


def _default(env: str) -> Any:
    """The default of a setting shared with the server (ocr_limits.SETTINGS)."""
    return setting(env).default


# The messages of the cross-field rules, in validate() and (through hack/gen-crd.py) in the CRD.
TOKEN_ORDER_ERROR = ("spec.inference.minVisualTokens must be <= spec.inference.maxVisualTokens (when unset, "
                     "maxVisualTokens is the engine's default: " + ", ".join(
                         f"{e} {default_max_visual_tokens(e)}" for e in ENGINES) + ")")
TOKEN_BUDGET_ERROR = ("spec.inference.minVisualTokens needs more crops than spec.inference.maxVisualTokens allows: "
                      f"token counts are {GLOBAL_TOKENS} (global view) + {CROP_TOKENS} per crop with "
                      f"{MIN_CROPS}..{MAX_CROPS} crops ({', '.join(map(str, TOKEN_STEPS))})")


def engine_error(e: EngineLimits) -> str:
    """What spec.engine `e` cannot serve, naming the fields to change."""
    needs = []
    if e.fixed_max_visual_tokens is not None:
        needs.append(f"spec.inference.maxVisualTokens {e.fixed_max_visual_tokens} (its default, when unset)")
    if e.highest_min_visual_tokens < setting("MIN_VISUAL_TOKENS").maximum:
        needs.append(f"spec.inference.minVisualTokens <= {e.highest_min_visual_tokens}")
    return (f"spec.engine {e.name} needs " + " and ".join(needs) + f": {e.why}, so a lower cap or a higher floor "
            "cannot be applied")


def env_override_error(env: str) -> str:
    """Why spec.env may not set `env`: the operator sets it from an OcrService field."""
    return (f"spec.env must not set {env}: set {FIELD_FOR_ENV[env]} instead (the operator sets {env} itself, "
            "and an env value would override it)")


# Label key prefixes the operator owns: its selector, instance and managed-by labels (the watches
# select on them) and the revision. A user label map may not set them (the CRD refuses them too).
RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "ocr.causalflow.dev/")
LABEL_MAP_FIELDS = ("spec.podLabels", "spec.monitoring.serviceMonitor.labels", "spec.monitoring.prometheusRule.labels")


def reserved_labels_error(field: str) -> str:
    """Why the label map at `field` is refused (the same message as the CRD's CEL rule)."""
    return f"{field} must not use the reserved prefixes {' and '.join(RESERVED_LABEL_PREFIXES)}"


def _reserved(labels: tuple[tuple[str, Any], ...]) -> bool:
    return any(str(key).startswith(RESERVED_LABEL_PREFIXES) for key, _ in labels)


def _frozen_map(value: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((value or {}).items()))


@dataclass(frozen=True)
class PvcSource:
    claim_name: str
    sub_path: str | None = None
    read_only: bool = True


@dataclass(frozen=True)
class Model:
    name: str = DEFAULT_MODEL_NAME
    revision: str | None = None
    cache_dir: str = DEFAULT_CACHE_DIR
    path: str | None = None
    pvc: PvcSource | None = None
    checksums: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Inference:
    """spec.inference, the server's model/runtime settings.

    Contract with the server (ocr_server.config), checked for every CRD-valid combination by
    tests/unit/test_config_contract.py: whatever the CRD (and `validate`) accepts renders a
    config.yaml the server starts with, and each default here is the server's own default.
    The model fixes the layout: 768 px crops (144 tokens) beside one 1024 px global view (256),
    so inputSize < baseSize; visual tokens are 256 + 144 per crop with 0 or 2..6 crops (ocr_limits)."""

    input_size: int = _default("INPUT_SIZE")
    base_size: int = _default("BASE_SIZE")
    min_visual_tokens: int = _default("MIN_VISUAL_TOKENS")
    # None: the engine's default (1024, or 1120 with vLLM), filled in by OcrServiceSpec.
    max_visual_tokens: int | None = None
    concurrency: int = _default("CONCURRENCY")
    batch_size: int = _default("BATCH_SIZE")
    decode_slots: int = _default("DECODE_SLOTS")  # 0: the server's own choice (64 on a GPU)
    timeout_seconds: int = _default("TIMEOUT_SEC")
    max_new_tokens: int = _default("MAX_NEW_TOKENS")


@dataclass(frozen=True)
class Resources:
    gpus: int = 1
    gpu_resource_name: str = "nvidia.com/gpu"
    cpu: str = "2"
    memory: str = "16Gi"


@dataclass(frozen=True)
class Metric:
    name: str = DEFAULT_METRIC
    target_average_value: str | None = None
    selector: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Schedule:
    name: str
    start: str
    end: str
    min_replicas: int
    days: tuple[str, ...] = ()
    time_zone: str = "UTC"

    def is_open(self, now: dt.datetime) -> bool:
        """Whether the window is open at `now` (aware datetime), in the window's time zone."""
        local = now.astimezone(ZoneInfo(self.time_zone))
        minutes = local.hour * 60 + local.minute
        start = _minutes(self.start)
        end = _minutes(self.end)
        day = DAYS[local.weekday()]
        if start < end:
            return (not self.days or day in self.days) and start <= minutes < end
        # Crosses midnight: the part after midnight belongs to the previous day's window.
        if minutes >= start:
            return not self.days or day in self.days
        if minutes < end:
            previous = DAYS[(local.weekday() - 1) % 7]
            return not self.days or previous in self.days
        return False


def _minutes(hhmm: str) -> int:
    hours, minutes = hhmm.split(":")
    return int(hours) * 60 + int(minutes)


@dataclass(frozen=True)
class Autoscaling:
    min_replicas: int = 1
    max_replicas: int = 3
    target_gpu_utilization: int = 80
    metric: Metric = field(default_factory=Metric)
    behavior: Mapping[str, Any] | None = None
    schedules: tuple[Schedule, ...] = ()
    # The second signal: average ocr_queue_depth per pod, next to the GPU metric (None: off).
    target_queue_depth: str | None = None

    def target_value(self) -> str:
        """The HPA's averageValue: the metric's own target, else targetGPUUtilization in the
        metric's unit (a percent for DCGM_FI_DEV_GPU_UTIL, a ratio for the server's gauge)."""
        if self.metric.target_average_value:
            return self.metric.target_average_value
        if self.metric.name == RATIO_GPU_METRIC:
            return f"{self.target_gpu_utilization * 10}m"
        return str(self.target_gpu_utilization)

    def effective_min_replicas(self, now: dt.datetime | None) -> tuple[int, str | None]:
        """minReplicas at `now` and the name of the open schedule window (first match wins)."""
        if now is not None:
            for window in self.schedules:
                if window.is_open(now):
                    return min(window.min_replicas, self.max_replicas), window.name
        return self.min_replicas, None


@dataclass(frozen=True)
class HealthCheck:
    path: str = "/health/ready"
    liveness_path: str = "/health/live"
    period_seconds: int = 10
    timeout_seconds: int = 5
    failure_threshold: int = 5


@dataclass(frozen=True)
class QualityGate:
    """spec.rollout.qualityGate: golden pages compared before a new revision takes traffic
    (quality.py decides, gaterun.py sends the pages). Bounds: ocr_limits.quality."""

    config_map: str | None = None  # goldenPages.configMapName, or
    pvc_path: str | None = None  # goldenPages.pvcPath: a folder inside spec.model.pvc (with its subPath)
    max_mean_distance: float = gate_limits.DEFAULT_MAX_MEAN_DISTANCE
    max_page_distance: float = gate_limits.DEFAULT_MAX_PAGE_DISTANCE
    max_new_tokens: int = gate_limits.DEFAULT_GATE_MAX_NEW_TOKENS
    timeout_seconds: int = gate_limits.DEFAULT_GATE_TIMEOUT_SECONDS


# The CRD's CEL rules say the same (crds/).
GOLDEN_SOURCE_ERROR = ("spec.rollout.qualityGate.goldenPages: set exactly one of configMapName (a ConfigMap's "
                       "binaryData) and pvcPath (a folder on the model PVC)")
GOLDEN_PVC_ERROR = ("spec.rollout.qualityGate.goldenPages.pvcPath needs spec.model.pvc: the path is a folder inside "
                    "the model volume")


def golden_path_error(path: str) -> str | None:
    """What is wrong with goldenPages.pvcPath (the CRD's pattern and maxLength say the same)."""
    w = "spec.rollout.qualityGate.goldenPages.pvcPath"
    if len(path) > gate_limits.MAX_GOLDEN_PATH_CHARS:
        return f"{w} is longer than {gate_limits.MAX_GOLDEN_PATH_CHARS} characters"
    if not re.fullmatch(gate_limits.GOLDEN_PATH_PATTERN, path):
        return (f"{w} {path!r} must be a relative path inside the model volume: segments of letters, digits, "
                f"'.', '_' and '-' joined by '/', none starting with '.' (so no '..')")
    return None


# The CRD's CEL rule says the same (crds/): the operator reads no Secret, so it has no API key.
GATE_AUTH_ERROR = ("spec.rollout.qualityGate cannot be used with spec.auth: the operator reads no Secret, "
                   "so it has no API key for the gate's requests")


@dataclass(frozen=True)
class Rollout:
    health_check: HealthCheck = field(default_factory=HealthCheck)
    model_load_timeout_seconds: int = 900
    progress_deadline_seconds: int = 1800
    auto_rollback: bool = True
    max_surge: int | str = 1
    settle_seconds: int = 30
    max_restarts: int = 3
    unschedulable_grace_seconds: int = 300
    revision_history_limit: int = 5
    quality_gate: QualityGate | None = None


@dataclass(frozen=True)
class ServiceSpec:
    type: str = "ClusterIP"
    port: int = DEFAULT_PORT
    annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Auth:
    secret_name: str
    key: str = "api-keys"


@dataclass(frozen=True)
class NetworkPolicySpec:
    enabled: bool = False
    allow_same_namespace: bool = True
    allowed_namespaces: tuple[str, ...] = ()
    allowed_cidrs: tuple[str, ...] = ()


@dataclass(frozen=True)
class PdbSpec:
    enabled: bool = True
    max_unavailable: int | str = 1


@dataclass(frozen=True)
class ServiceMonitorSpec:
    enabled: bool = False
    interval: str = "30s"
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PrometheusRuleSpec:
    """spec.monitoring.prometheusRule: this OcrService's own alert rules (render/prometheusrule.py)."""
    enabled: bool = False
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class OcrServiceSpec:
    image: str
    engine: str = DEFAULT_ENGINE  # ENGINE of the server: transformers | vllm
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()
    model: Model = field(default_factory=Model)
    inference: Inference = field(default_factory=Inference)
    resources: Resources = field(default_factory=Resources)
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] | None = None
    priority_class_name: str | None = None
    service_account_name: str | None = None
    termination_grace_period_seconds: int = 60
    pod_labels: tuple[tuple[str, str], ...] = ()
    pod_annotations: tuple[tuple[str, str], ...] = ()
    env: tuple[Mapping[str, Any], ...] = ()
    replicas: int = 1
    autoscaling: Autoscaling | None = None
    rollout: Rollout = field(default_factory=Rollout)
    service: ServiceSpec = field(default_factory=ServiceSpec)
    auth: Auth | None = None
    tls_secret_name: str | None = None
    network_policy: NetworkPolicySpec = field(default_factory=NetworkPolicySpec)
    pdb: PdbSpec = field(default_factory=PdbSpec)
    service_monitor: ServiceMonitorSpec = field(default_factory=ServiceMonitorSpec)
    prometheus_rule: PrometheusRuleSpec = field(default_factory=PrometheusRuleSpec)

    def __post_init__(self) -> None:
        """An unset spec.inference.maxVisualTokens is the engine's default, so that choosing the
        engine alone works (the CRD cannot default one field from another)."""
        if self.inference.max_visual_tokens is None:
            cap = default_max_visual_tokens(self.engine)
            object.__setattr__(self, "inference", replace(self.inference, max_visual_tokens=cap))

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


def _int(section: Mapping[str, Any], key: str, default: int | None, where: str) -> int:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{where}.{key} must be an integer, got {value!r}")
    return value


def _str(section: Mapping[str, Any], key: str, default: str | None, where: str) -> str | None:
    value = section.get(key, default)
    if value is not None and not isinstance(value, str):
        raise SpecError(f"{where}.{key} must be a string, got {value!r}")
    return value


def _bool(section: Mapping[str, Any], key: str, default: bool, where: str) -> bool:
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise SpecError(f"{where}.{key} must be a boolean, got {value!r}")
    return value


def _number(section: Mapping[str, Any], key: str, default: float, where: str) -> float:
    value = section.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"{where}.{key} must be a number, got {value!r}")
    return float(value)


def _quality_gate(ro: Mapping[str, Any]) -> QualityGate | None:
    """spec.rollout.qualityGate, or None when there is no gate."""
    if ro.get("qualityGate") is None:
        return None
    w = "spec.rollout.qualityGate"
    g = _section(ro, "qualityGate", "spec.rollout")
    pages = _section(g, "goldenPages", w)
    name = _str(pages, "configMapName", None, f"{w}.goldenPages")
    path = _str(pages, "pvcPath", None, f"{w}.goldenPages")
    if bool(name) == bool(path):
        raise SpecError(GOLDEN_SOURCE_ERROR)
    return QualityGate(
        config_map=name or None,
        pvc_path=path or None,
        max_mean_distance=_number(g, "maxMeanDistance", QualityGate.max_mean_distance, w),
        max_page_distance=_number(g, "maxPageDistance", QualityGate.max_page_distance, w),
        max_new_tokens=_int(g, "maxNewTokens", QualityGate.max_new_tokens, w),
        timeout_seconds=_int(g, "timeoutSeconds", QualityGate.timeout_seconds, w),
    )


def _section(spec: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = spec.get(key) or {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where}.{key} must be an object, got {value!r}")
    return value


def _quantity(value: Any) -> str:
    return str(value)


def parse(spec: Mapping[str, Any]) -> OcrServiceSpec:
    """Parse and default an OcrService `spec` mapping; raise SpecError naming the field."""
    where = "spec"
    image = spec.get("image")
    if not isinstance(image, str) or not image:
        raise SpecError("spec.image is required (the OCR server image)")

    m = _section(spec, "model", where)
    pvc = None
    if m.get("pvc"):
        p = m["pvc"]
        if not p.get("claimName"):
            raise SpecError("spec.model.pvc.claimName is required")
        pvc = PvcSource(p["claimName"], p.get("subPath"), _bool(p, "readOnly", True, "spec.model.pvc"))
    model = Model(
        name=_str(m, "name", Model.name, "spec.model"),
        revision=_str(m, "revision", None, "spec.model"),
        cache_dir=_str(m, "cacheDir", Model.cache_dir, "spec.model"),
        path=_str(m, "path", None, "spec.model"),
        pvc=pvc,
        checksums=_frozen_map(m.get("checksums")),
    )

    i = _section(spec, "inference", where)
    w = "spec.inference"
    inference = Inference(
        input_size=_int(i, "inputSize", Inference.input_size, w),
        base_size=_int(i, "baseSize", Inference.base_size, w),
        min_visual_tokens=_int(i, "minVisualTokens", Inference.min_visual_tokens, w),
        max_visual_tokens=None if i.get("maxVisualTokens") is None else _int(i, "maxVisualTokens", None, w),
        concurrency=_int(i, "concurrency", Inference.concurrency, w),
        batch_size=_int(i, "batchSize", Inference.batch_size, w),
        decode_slots=_int(i, "decodeSlots", Inference.decode_slots, w),
        timeout_seconds=_int(i, "timeoutSeconds", Inference.timeout_seconds, w),
        max_new_tokens=_int(i, "maxNewTokens", Inference.max_new_tokens, w),
    )

    r = _section(spec, "resources", where)
    resources = Resources(
        gpus=_int(r, "gpus", Resources.gpus, "spec.resources"),
        gpu_resource_name=_str(r, "gpuResourceName", Resources.gpu_resource_name, "spec.resources"),
        cpu=_quantity(r.get("cpu", Resources.cpu)),
        memory=_quantity(r.get("memory", Resources.memory)),
    )

    replicas = _int(spec, "replicas", OcrServiceSpec.replicas, where)

    autoscaling = None
    a = spec.get("autoscaling")
    if a is not None and _bool(a, "enabled", True, "spec.autoscaling"):
        w = "spec.autoscaling"
        met = _section(a, "metric", w)
        tav = met.get("targetAverageValue")
        autoscaling = Autoscaling(
            min_replicas=_int(a, "minReplicas", Autoscaling.min_replicas, w),
            max_replicas=_int(a, "maxReplicas", Autoscaling.max_replicas, w),
            target_gpu_utilization=_int(a, "targetGPUUtilization", Autoscaling.target_gpu_utilization, w),
            metric=Metric(
                name=_str(met, "name", DEFAULT_METRIC, "spec.autoscaling.metric"),
                target_average_value=None if tav is None else str(tav),
                selector=_frozen_map(met.get("selector")),
            ),
            behavior=a.get("behavior") or None,
            target_queue_depth=None if a.get("targetQueueDepth") is None else str(a["targetQueueDepth"]),
            schedules=tuple(
                Schedule(
                    name=s["name"],
                    start=s["start"],
                    end=s["end"],
                    min_replicas=int(s["minReplicas"]),
                    days=tuple(s.get("days") or ()),
                    time_zone=s.get("timeZone") or "UTC",
                )
                for s in a.get("schedules") or ()
            ),
        )

    ro = _section(spec, "rollout", where)
    hc = _section(ro, "healthCheck", "spec.rollout")
    w = "spec.rollout.healthCheck"
    rollout = Rollout(
        health_check=HealthCheck(
            path=_str(hc, "path", HealthCheck.path, w),
            liveness_path=_str(hc, "livenessPath", HealthCheck.liveness_path, w),
            period_seconds=_int(hc, "periodSeconds", HealthCheck.period_seconds, w),
            timeout_seconds=_int(hc, "timeoutSeconds", HealthCheck.timeout_seconds, w),
            failure_threshold=_int(hc, "failureThreshold", HealthCheck.failure_threshold, w),
        ),
        model_load_timeout_seconds=_int(ro, "modelLoadTimeoutSeconds", Rollout.model_load_timeout_seconds, "spec.rollout"),
        progress_deadline_seconds=_int(ro, "progressDeadlineSeconds", Rollout.progress_deadline_seconds, "spec.rollout"),
        auto_rollback=_bool(ro, "autoRollback", True, "spec.rollout"),
        max_surge=ro.get("maxSurge", Rollout.max_surge),
        settle_seconds=_int(ro, "settleSeconds", Rollout.settle_seconds, "spec.rollout"),
        max_restarts=_int(ro, "maxRestarts", Rollout.max_restarts, "spec.rollout"),
        unschedulable_grace_seconds=_int(ro, "unschedulableGraceSeconds", Rollout.unschedulable_grace_seconds, "spec.rollout"),
        revision_history_limit=_int(ro, "revisionHistoryLimit", Rollout.revision_history_limit, "spec.rollout"),
        quality_gate=_quality_gate(ro),
    )

    sv = _section(spec, "service", where)
    service = ServiceSpec(
        type=_str(sv, "type", ServiceSpec.type, "spec.service"),
        port=_int(sv, "port", ServiceSpec.port, "spec.service"),
        annotations=_frozen_map(sv.get("annotations")),
    )

    auth = None
    if spec.get("auth"):
        au = spec["auth"]
        if not au.get("secretName"):
            raise SpecError("spec.auth.secretName is required")
        auth = Auth(secret_name=au["secretName"], key=au.get("key") or "api-keys")

    tls = (spec.get("tls") or {}).get("secretName")

    npol = _section(spec, "networkPolicy", where)
    network_policy = NetworkPolicySpec(
        enabled=_bool(npol, "enabled", False, "spec.networkPolicy"),
        allow_same_namespace=_bool(npol, "allowSameNamespace", True, "spec.networkPolicy"),
        allowed_namespaces=tuple(npol.get("allowedNamespaces") or ()),
        allowed_cidrs=tuple(npol.get("allowedCIDRs") or ()),
    )

    pd = _section(spec, "podDisruptionBudget", where)
    pdb = PdbSpec(
        enabled=_bool(pd, "enabled", True, "spec.podDisruptionBudget"),
        max_unavailable=pd.get("maxUnavailable", PdbSpec.max_unavailable),
    )

    mon = _section(_section(spec, "monitoring", where), "serviceMonitor", "spec.monitoring")
    service_monitor = ServiceMonitorSpec(
        enabled=_bool(mon, "enabled", False, "spec.monitoring.serviceMonitor"),
        interval=_str(mon, "interval", ServiceMonitorSpec.interval, "spec.monitoring.serviceMonitor"),
        labels=_frozen_map(mon.get("labels")),
    )
    pr = _section(_section(spec, "monitoring", where), "prometheusRule", "spec.monitoring")
    prometheus_rule = PrometheusRuleSpec(
        enabled=_bool(pr, "enabled", False, "spec.monitoring.prometheusRule"),
        labels=_frozen_map(pr.get("labels")),
    )

    parsed = OcrServiceSpec(
        image=image,
        engine=_str(spec, "engine", OcrServiceSpec.engine, where),
        image_pull_policy=_str(spec, "imagePullPolicy", "IfNotPresent", where),
        image_pull_secrets=tuple(s["name"] for s in spec.get("imagePullSecrets") or ()),
        model=model,
        inference=inference,
        resources=resources,
        node_selector=_frozen_map(spec.get("nodeSelector")),
        tolerations=tuple(spec.get("tolerations") or ()),
        affinity=spec.get("affinity") or None,
        priority_class_name=_str(spec, "priorityClassName", None, where),
        service_account_name=_str(spec, "serviceAccountName", None, where),
        termination_grace_period_seconds=_int(spec, "terminationGracePeriodSeconds", 60, where),
        pod_labels=_frozen_map(spec.get("podLabels")),
        pod_annotations=_frozen_map(spec.get("podAnnotations")),
        env=tuple(spec.get("env") or ()),
        replicas=replicas,
        autoscaling=autoscaling,
        rollout=rollout,
        service=service,
        auth=auth,
        tls_secret_name=tls,
        network_policy=network_policy,
        pdb=pdb,
        service_monitor=service_monitor,
        prometheus_rule=prometheus_rule,
    )
    validate(parsed)
    return parsed


def engine_serves(e: EngineLimits, inf: Inference) -> bool:
    """Whether the engine can apply these visual-token settings (ocr_limits.engines)."""
    if e.fixed_max_visual_tokens is not None and inf.max_visual_tokens != e.fixed_max_visual_tokens:
        return False
    return inf.min_visual_tokens <= e.highest_min_visual_tokens


def _out_of_bounds(s: Setting, value: Any) -> str | None:
    """The error of a value outside a shared setting's choices or range, else None."""
    if s.choices and value not in s.choices:
        return f"{s.spec_path} must be one of {', '.join(map(str, s.choices))}, got {value!r}"
    if s.minimum is not None and not s.minimum <= value <= s.maximum:
        return f"{s.spec_path} must be within {s.minimum}..{s.maximum}, got {value}"
    return None


def validate(s: OcrServiceSpec) -> None:
    """The CRD's CEL and range rules, in Python; raise SpecError naming the field."""
    errors: list[str] = []
    inf = s.inference
    shared = (
        ("ENGINE", s.engine), ("INPUT_SIZE", inf.input_size), ("BASE_SIZE", inf.base_size),
        ("MIN_VISUAL_TOKENS", inf.min_visual_tokens), ("MAX_VISUAL_TOKENS", inf.max_visual_tokens),
        ("CONCURRENCY", inf.concurrency), ("BATCH_SIZE", inf.batch_size), ("DECODE_SLOTS", inf.decode_slots),
        ("TIMEOUT_SEC", inf.timeout_seconds),
        ("MAX_NEW_TOKENS", inf.max_new_tokens), ("PORT", s.service.port),
    )
    errors += [e for e in (_out_of_bounds(setting(env), value) for env, value in shared) if e]
    if s.engine in ENGINES and not engine_serves(engine_limits(s.engine), inf):
        errors.append(engine_error(engine_limits(s.engine)))
    if inf.min_visual_tokens > inf.max_visual_tokens:
        errors.append(TOKEN_ORDER_ERROR)
    if not token_budget_fits(inf.min_visual_tokens, inf.max_visual_tokens):
        errors.append(TOKEN_BUDGET_ERROR)
    errors += [env_override_error(e.get("name")) for e in s.env if e.get("name") in FIELD_FOR_ENV]
    if inf.input_size >= inf.base_size:
        errors.append("spec.inference.inputSize (local crop) must be smaller than spec.inference.baseSize (global view)")
    if s.resources.gpus < 0:
        errors.append(f"spec.resources.gpus must be >= 0, got {s.resources.gpus}")
    if s.replicas < 0:
        errors.append(f"spec.replicas must be >= 0, got {s.replicas}")
    a = s.autoscaling
    if a is not None:
        if a.min_replicas < 1:
            errors.append(f"spec.autoscaling.minReplicas must be >= 1, got {a.min_replicas}")
        if a.min_replicas > a.max_replicas:
            errors.append("spec.autoscaling.minReplicas must be <= spec.autoscaling.maxReplicas")
        if not 1 <= a.target_gpu_utilization <= 100:
            errors.append("spec.autoscaling.targetGPUUtilization must be within 1..100")
        for window in a.schedules:
            if window.min_replicas > a.max_replicas:
                errors.append("spec.autoscaling.schedules[].minReplicas must be <= spec.autoscaling.maxReplicas")
    if a is not None and a.target_queue_depth is not None and a.metric.name == QUEUE_METRIC:
        errors.append("spec.autoscaling.targetQueueDepth and spec.autoscaling.metric.name "
                      f"{QUEUE_METRIC} name the same metric twice")
    if a is not None and s.resources.gpus == 0 and a.metric.name == DEFAULT_METRIC:
        errors.append("spec.autoscaling.metric.name DCGM_FI_DEV_GPU_UTIL needs spec.resources.gpus > 0")
    hc = s.rollout.health_check
    for name, value in (
        ("periodSeconds", hc.period_seconds),
        ("timeoutSeconds", hc.timeout_seconds),
        ("failureThreshold", hc.failure_threshold),
    ):
        if value < 1:
            errors.append(f"spec.rollout.healthCheck.{name} must be positive, got {value}")
    if s.rollout.model_load_timeout_seconds < 1:
        errors.append("spec.rollout.modelLoadTimeoutSeconds must be positive")
    if s.rollout.progress_deadline_seconds <= s.rollout.model_load_timeout_seconds:
        errors.append("spec.rollout.progressDeadlineSeconds must be greater than spec.rollout.modelLoadTimeoutSeconds")
    gate = s.rollout.quality_gate
    if gate is not None:
        w = "spec.rollout.qualityGate"
        for name, value in (("maxMeanDistance", gate.max_mean_distance), ("maxPageDistance", gate.max_page_distance),
                            ("maxNewTokens", gate.max_new_tokens), ("timeoutSeconds", gate.timeout_seconds)):
            _, low, high = gate_limits.GATE_FIELDS[name]
            if not low <= value <= high:
                errors.append(f"{w}.{name} must be within {low}..{high}, got {value}")
        if s.auth is not None:
            errors.append(GATE_AUTH_ERROR)
        if gate.pvc_path is not None:
            if s.model.pvc is None:
                errors.append(GOLDEN_PVC_ERROR)
            if problem := golden_path_error(gate.pvc_path):
                errors.append(problem)
    if s.model.pvc is not None and s.model.path is not None:
        errors.append("spec.model.pvc and spec.model.path are mutually exclusive")
    label_maps = (s.pod_labels, s.service_monitor.labels, s.prometheus_rule.labels)
    errors += [reserved_labels_error(field) for field, labels in zip(LABEL_MAP_FIELDS, label_maps) if _reserved(labels)]
    if errors:
        raise SpecError("; ".join(errors))
