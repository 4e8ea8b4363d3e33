"""What the OcrService's pods get: resources, and the Kubernetes types copied to them as written
(tolerations, env, pull secrets), each checked against its own model.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..fields import Quantity, Rule, api, model

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


@model
class Resources:
    gpus: int = api("GPUs per pod (requests = limits); 0 runs on CPU.", minimum=0, maximum=16, default=1)
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
