"""runtime.podstatus: a pod the scheduler found no node for, as both controllers read it."""

from ocr_operator.runtime.podstatus import unschedulable


def pod(*conditions: dict) -> dict:
    return {"metadata": {"name": "p"}, "status": {"conditions": list(conditions)}}


NO_NODE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
           "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}


def test_a_pod_no_node_takes_is_unschedulable_with_the_schedulers_message():
    assert unschedulable(pod({"type": "Ready", "status": "False"}, NO_NODE)) == NO_NODE


def test_a_placed_pod_or_one_not_looked_at_yet_is_not():
    assert unschedulable(pod({"type": "PodScheduled", "status": "True"})) is None
    assert unschedulable(pod()) is None
    assert unschedulable({"metadata": {"name": "p"}}) is None


def test_a_pod_held_by_a_scheduling_gate_is_not_unschedulable():
    gated = {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
    assert unschedulable(pod(gated)) is None
