"""kwok's part of the local cluster (pure): the fake GPU nodes, and the stages that make their
pods run, become ready, or fail as a label asks (`causalflow.dev/simulate`, stages.yaml)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from localcluster.nodeconfig import GPU_RESOURCE, NODE_KIND_LABEL


class KwokStagesMissing(RuntimeError):
    """kwok's own stage files are not where the binaries build put them."""


STAGES_FILE = Path(__file__).with_name("stages.yaml")
SIMULATE_LABEL = "causalflow.dev/simulate"
SIMULATIONS = ("never-ready", "flap", "crashloop", "image-pull-error", "oom-killed", "create-config-error")
GPU_NODES = (("gpu-node-0", 8), ("gpu-node-1", 8))


def kwok_nodes() -> tuple[tuple[str, int], ...]:
    """The fake GPU nodes: GPU_NODES, or CAUSALFLOW_KWOK_NODES of them (8 GPUs each).

    With CAUSALFLOW_KWOK_PODS (default 110, the kubelet's) they hold 220 pods; the operator
    bench raises both so that 1,000 OcrServices fit."""
    count = int(os.environ.get("CAUSALFLOW_KWOK_NODES", len(GPU_NODES)))
    return GPU_NODES[:count] + tuple((f"gpu-node-{i}", 8) for i in range(len(GPU_NODES), count))


def kwok_pods() -> str:
    return str(int(os.environ.get("CAUSALFLOW_KWOK_PODS", "110")))


def node_manifests() -> list[dict]:
    """The fake GPU nodes as Node objects kwok manages (the `kwok.x-k8s.io/node: fake` annotation)."""
    nodes = []
    for name, gpus in kwok_nodes():
        nodes.append({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake",
                                                       "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"type": "kwok", NODE_KIND_LABEL: "kwok", "kubernetes.io/hostname": name,
                                    "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                    "node.kubernetes.io/instance-type": "fake-gpu-8x",
                                    "nvidia.com/gpu.present": "true",
                                    "nvidia.com/gpu.product": "NVIDIA-H200",
                                    "nvidia.com/gpu.count": str(gpus)}},
            "status": {"capacity": (cap := {"cpu": "64", "memory": "512Gi", "pods": kwok_pods(),
                                            "ephemeral-storage": "1Ti", GPU_RESOURCE: str(gpus)}),
                       "allocatable": dict(cap)},
        })
    return nodes


def stages(stage_dir: Path) -> list[dict]:
    """kwok's configuration: its own stages (`upstream_stages`), then this harness's (stages.yaml)."""
    return upstream_stages(stage_dir) + list(yaml.safe_load_all(STAGES_FILE.read_text()))


def upstream_stages(stage_dir: Path) -> list[dict]:
    """kwok's own node and pod stages, with pod-ready narrowed to pods that simulate nothing."""
    files = ["node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
             "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml"]
    stages = []
    for rel in files:
        path = stage_dir / rel
        if not path.exists():
            raise KwokStagesMissing(f"kwok stage {path} missing: rebuild with `make cluster-binaries`")
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["metadata"]["name"] == "pod-ready":
                doc["spec"]["selector"]["matchExpressions"].append({
                    "key": f'.metadata.labels["{SIMULATE_LABEL}"]', "operator": "NotIn",
                    "values": [s for s in SIMULATIONS if s != "flap"],
                })
            if doc:
                stages.append(doc)
    return stages
