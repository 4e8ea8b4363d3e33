"""What the OcrService's pods get: resources, and the Kubernetes types copied to them as written
(tolerations, env, pull secrets), each checked against its own model.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..fields import Constraints, Quantity, Rule, api, model

# A Kubernetes quantity ("4", "3500m", "24Gi"): the API server's own pattern for one.
QUANTITY = (r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)"
            r"|(\.[0-9]+))))?$")
# Label key prefixes the operator owns: its selector, instance and managed-by labels (the watches
# select on them) and the revision. A user label map may not set them.
RESERVED_LABEL_PREFIXES = ("app.kubernetes.io/", "ocr.causalflow.dev/")
ANNOTATION_PREFIX = "ocr.causalflow.dev/"


def reserved_labels_error(field: str) -> str:
    """Why the label map at `field` is refused (the CRD's rule and the operator say the same)."""
    return f"{field} must not use the reserved prefixes {' and '.join(RESERVED_LABEL_PREFIXES)}"


def reserved_labels_rule(field: str) -> Rule:
    """The rule on a label map at `field` (spec.podLabels, ...): no key with a reserved prefix."""
    cel = " && ".join(f"!k.startsWith('{p}')" for p in RESERVED_LABEL_PREFIXES)
    return Rule(f"self.all(k, {cel})", reserved_labels_error(field),
                holds=lambda labels: not any(k.startswith(RESERVED_LABEL_PREFIXES) for k, _ in labels))


# Both engines run one model on one GPU (GPU_ID; vLLM without tensor parallelism): a second GPU
# requested for the pod would be reserved, paid for and idle.
GPUS_ERROR = ("spec.resources.gpus must be 0 or 1: the server drives one GPU per pod (one model per GPU), so a "
              "second one would sit idle; add replicas for more throughput")


@model
class Resources:
    gpus: int = api("GPUs per pod (requests = limits): 1, or 0 to run on CPU.", minimum=0, default=1,
                    rules=(Rule("self <= 1", GPUS_ERROR, holds=lambda gpus: gpus <= 1),))
    gpu_resource_name: str = api(
        "Extended resource name of the GPU (e.g. nvidia.com/gpu, or a MIG profile such as nvidia.com/mig-3g.40gb).",
        max_length=253, default="nvidia.com/gpu",
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$")
    cpu: Quantity = api('CPU request per pod (a quantity, e.g. "4" or "3500m"); no CPU limit is set.', default="2",
                        pattern=QUANTITY)
    memory: Quantity = api('Memory request and limit per pod (a quantity, e.g. "24Gi").', default="16Gi",
                           pattern=QUANTITY)


@model
class LocalObjectReference:
    """A reference to a registry credentials Secret."""

    name: str = api("Name of a kubernetes.io/dockerconfigjson Secret in this namespace.", min_length=1,
                    max_length=253, required=True)


@model
class Toleration:
    """A core/v1 Toleration."""

    key: str | None = api("Taint key the toleration applies to; empty with operator Exists matches all taints.")
    operator: str | None = api("Exists or Equal (default Equal).", enum=("Exists", "Equal"))
    value: str | None = api("Taint value to match with operator Equal.")
    effect: str | None = api("Taint effect to match; empty matches all effects.",
                             enum=("", "NoSchedule", "PreferNoSchedule", "NoExecute"))
    toleration_seconds: int | None = api("For NoExecute, how long the pod stays bound after the taint appears.",
                                         format="int64")


@model
class LabelSelectorRequirement:
    """A core/v1 LabelSelectorRequirement."""

    key: str = api("The label key.", min_length=1, max_length=316, required=True)
    operator: str = api("How the key relates to the values.", enum=("In", "NotIn", "Exists", "DoesNotExist"),
                        required=True)
    values: tuple[str, ...] = api("The values, for In and NotIn.", max_items=64, item=Constraints(max_length=63))


@model
class LabelSelector:
    """A core/v1 LabelSelector: every matchLabels pair and every matchExpressions requirement must hold."""

    match_labels: tuple[tuple[str, str], ...] = api("Labels the pods must have.", max_properties=32,
                                                     item=Constraints(max_length=63))
    match_expressions: tuple[Mapping[str, Any], ...] = api("Requirements on the pods' labels.", max_items=16,
                                                           shape=LabelSelectorRequirement)


@model
class TopologySpreadConstraint:
    """A core/v1 TopologySpreadConstraint. Without labelSelector it counts this OcrService's own pods,
    each revision apart (matchLabelKeys pod-template-hash, unless given): during a rollout the new
    pods spread among themselves instead of being held by where the old ones run."""

    max_skew: int = api("The most the number of pods may differ between two domains.", minimum=1, required=True)
    topology_key: str = api("The node label whose values are the domains: kubernetes.io/hostname (one node each) or "
                            "topology.kubernetes.io/zone.", min_length=1, max_length=316, required=True)
    when_unsatisfiable: str = api("DoNotSchedule: a pod that would break maxSkew waits (Pending); ScheduleAnyway: "
                                  "the scheduler only prefers the spread.", enum=("DoNotSchedule", "ScheduleAnyway"),
                                  required=True)
    label_selector: Mapping[str, Any] | None = api("The pods counted; default: this OcrService's pods.",
                                                   shape=LabelSelector)
    match_label_keys: tuple[str, ...] = api("Pod label keys whose values narrow the pods counted to the new pod's; "
                                            "default (with the default labelSelector): pod-template-hash.",
                                            max_items=8, item=Constraints(max_length=316))
    min_domains: int | None = api("With DoNotSchedule: fewer domains than this count as having 0 pods.", minimum=1)
    node_affinity_policy: str | None = api("Honor or Ignore the pod's node affinity and selector when counting.",
                                           enum=("Honor", "Ignore"))
    node_taints_policy: str | None = api("Honor or Ignore node taints when counting.", enum=("Honor", "Ignore"))


def _env_rules() -> tuple[Rule, ...]:
    from .env import env_rules  # built from the finished OcrService model

    return (Rule("!(has(self.value) && has(self.valueFrom))",
                 "spec.env[].value and spec.env[].valueFrom are mutually exclusive",
                 holds=lambda e: e.value is None or e.value_from is None),) + env_rules()


@model
class EnvVar:
    """A core/v1 EnvVar (name with value or valueFrom)."""

    __rules__ = _env_rules

    name: str = api("Variable name.", min_length=1, max_length=128, pattern="^[-._a-zA-Z][-._a-zA-Z0-9]*$",
                    required=True)
    value: str | None = api("Literal value.")
    value_from: Mapping[str, Any] | None = api(
        "A core/v1 EnvVarSource (secretKeyRef, configMapKeyRef, fieldRef, resourceFieldRef), copied as is.")
