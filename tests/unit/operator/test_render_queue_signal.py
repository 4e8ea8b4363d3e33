"""The second autoscaling signal: spec.autoscaling.targetQueueDepth puts the server's
ocr_queue_depth in the same HPA as the GPU metric (the HPA follows the larger recommendation)."""

from __future__ import annotations

import pytest

from ocr_operator.ocrservice.render import render_all
from ocr_operator.spec import SpecError

from .helpers import owner, parsed


def hpa_of(spec: dict) -> dict:
    body = owner(spec)
    return render_all(body, parsed(body)).objects["HorizontalPodAutoscaler"]


def test_target_queue_depth_adds_the_queue_metric_beside_the_gpu_metric_in_one_hpa():
    hpa = hpa_of({"autoscaling": {"targetGPUUtilization": 70, "targetQueueDepth": 4}})
    assert hpa["spec"]["metrics"] == [
        {"type": "Pods", "pods": {"metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                                  "target": {"type": "AverageValue", "averageValue": "70"}}},
        {"type": "Pods", "pods": {"metric": {"name": "ocr_queue_depth"},
                                  "target": {"type": "AverageValue", "averageValue": "4"}}},
    ]


def test_the_queue_metric_carries_the_metric_selector_too():
    hpa = hpa_of({"autoscaling": {"targetQueueDepth": "2500m", "metric": {"selector": {"gpu": "h200"}}}})
    queue = hpa["spec"]["metrics"][1]["pods"]
    assert queue["metric"] == {"name": "ocr_queue_depth", "selector": {"matchLabels": {"gpu": "h200"}}}
    assert queue["target"]["averageValue"] == "2500m"


def test_without_target_queue_depth_the_hpa_has_only_the_gpu_metric():
    assert [m["pods"]["metric"]["name"] for m in hpa_of({"autoscaling": {}})["spec"]["metrics"]] == ["DCGM_FI_DEV_GPU_UTIL"]


def test_target_queue_depth_with_the_queue_as_main_metric_is_refused_naming_the_field():
    with pytest.raises(SpecError, match="spec.autoscaling.targetQueueDepth"):
        parsed(owner({"autoscaling": {"targetQueueDepth": 4, "metric": {"name": "ocr_queue_depth"}}}))
