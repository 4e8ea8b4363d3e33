"""What a failing operator test prints about the nodes (tests/e2e/operator_fixtures.node_lines)."""

from __future__ import annotations

from tests.e2e.operator_fixtures import node_lines


def node(taints: list[dict], **conditions: str) -> dict:
    return {"metadata": {"name": "real-node-0"}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": t, "status": s, "reason": f"Kubelet{t}", "message": "m",
                                       "lastTransitionTime": "2026-12-07T19:04:00Z"} for t, s in conditions.items()]}}


def test_a_pressured_node_is_named_with_its_taint_and_the_condition_that_turned():
    [line] = node_lines([node([{"key": "causalflow.dev/real-node", "effect": "NoSchedule"},
                               {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}],
                              Ready="True", DiskPressure="True", MemoryPressure="False")])
    assert "node.kubernetes.io/disk-pressure:NoSchedule" in line
    assert "DiskPressure=True since 2026-12-07T19:04:00Z (KubeletDiskPressure: m)" in line
    assert "Ready" not in line.split("conditions off:")[1] and "MemoryPressure" not in line


def test_a_healthy_node_reports_no_condition_off():
    assert node_lines([node([], Ready="True", DiskPressure="False")]) == ["real-node-0: taints []; conditions off: none"]


def test_a_node_not_ready_is_reported():
    [line] = node_lines([node([], Ready="False")])
    assert "Ready=False" in line
