"""autoscaling/v2 HorizontalPodAutoscaler on a Pods metric (GPU utilisation by default), and on
the server's queue depth next to it when `spec.autoscaling.targetQueueDepth` is set.

Two metrics in one HPA, not two HPAs (which would fight over the Deployment's size): the HPA
controller computes a replica count per metric and follows the largest, so a long queue adds
pods while the GPU gauge reads low (it reads ~100 % whenever a batch runs, whatever waits behind
it), and the service shrinks only when both are low. A metric the API cannot serve is skipped for
a scale-up but blocks a scale-down, the safe side for a service with slow cold starts.

The HPA scales the OcrService itself (its scale subresource: spec.replicas, status.replicas,
status.selector), not the Deployment: `kubectl get --raw .../ocrservices/NAME/scale` shows the
HPA's choice, the operator carries it to the Deployment, and the admission policy in
crds/ocr.causalflow.dev_replicas-policy.yaml refuses anyone else's write of spec.replicas while
autoscaling is on (`kubectl scale` gets an error instead of a silent fight with the HPA).
"""

from __future__ import annotations

from typing import Any, Mapping

from ocr_operator.spec import API_VERSION, KIND, QUEUE_METRIC, OcrServiceSpec

from .. import naming

# Slow GPU cold starts: scale up promptly, scale down slowly.
DEFAULT_BEHAVIOR = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "selectPolicy": "Max",
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
    },
}


def behavior(spec: OcrServiceSpec) -> dict[str, Any]:
    out = {k: dict(v) for k, v in DEFAULT_BEHAVIOR.items()}
    for direction, rules in (spec.autoscaling.behavior or {}).items():
        out[direction] = {**out.get(direction, {}), **rules}
    return out


def render(owner: Mapping[str, Any], spec: OcrServiceSpec, *, min_replicas: int | None = None) -> dict[str, Any] | None:
    a = spec.autoscaling
    if a is None:
        return None
    name = owner["metadata"]["name"]
    metric: dict[str, Any] = {"name": a.metric.name}
    if a.metric.selector:
        metric["selector"] = {"matchLabels": dict(a.metric.selector)}
    metrics = [{"type": "Pods",
                "pods": {"metric": metric, "target": {"type": "AverageValue", "averageValue": a.target_value()}}}]
    if a.target_queue_depth is not None:
        queue: dict[str, Any] = {"name": QUEUE_METRIC}
        if a.metric.selector:
            queue["selector"] = {"matchLabels": dict(a.metric.selector)}
        metrics.append({"type": "Pods", "pods": {"metric": queue, "target": {
            "type": "AverageValue", "averageValue": a.target_queue_depth}}})
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": naming.metadata(owner, naming.hpa_name(name)),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": name},
            "minReplicas": a.min_replicas if min_replicas is None else min_replicas,
            "maxReplicas": a.max_replicas,
            "metrics": metrics,
            "behavior": behavior(spec),
        },
    }
