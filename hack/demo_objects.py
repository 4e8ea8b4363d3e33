"""What the demo applies: its example OcrService, golden pages, tiny model B and the patches of its
steps (the objects; hack/demo.py runs the steps)."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from hack.demo_support import DemoError, get_json, kubectl, wait
from localcluster.cluster import REPO
from localcluster.nodeconfig import NODE_SELECTOR, TOLERATION

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / ".demo"
LOGS = DEMO_DIR / "logs"
STATE_DIR = REPO / ".cluster"  # where `make cluster-up` keeps a running cluster
CRD = ROOT / "crds" / "ocr.causalflow.dev_ocrservices.yaml"
EXAMPLE = ROOT / "examples" / "rollback-demo.yaml"  # short health-check settings: a rollback in seconds
NAMESPACE = "rollback-demo"  # the example's own namespace
PY = sys.executable
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok")
SIMULATE_LABEL = "causalflow.dev/simulate"
MISSING_MODEL = "/models/deepseek-ai/DeepSeek-OCR-3"  # spec.model.path: weights the demo image does not carry
CRASH_PATCH = {"spec": {"model": {"path": MISSING_MODEL}}}  # step 5 on the real node: the server exits at startup
# The quality gate (real node only): golden pages drawn by hack/sample-page.py at small sizes (a
# global view each: about half a second a page on the CPU), and tiny model B, the worse model.
GOLDEN = "demo-golden"  # the ConfigMap of golden pages
GOLDEN_PAGES = {"invoice-620.png": (620, 877), "invoice-480.png": (480, 679)}  # name: (width, height)
GATE_TOKENS = 32  # each gate request's new-token budget (at most inference.maxNewTokens)
MODEL_NAME = "deepseek-ai/DeepSeek-OCR-2"  # the server's default MODEL_NAME: cacheDir/<it> holds the weights
MODELS_DIR = DEMO_DIR / "models"  # the hostPath volume's root: one sub-folder per generator version
MODEL_B_CLAIM = "tiny-model-b"
MODEL_B_PV = f"{NAMESPACE}-tiny-model-b"
# The example's health-check settings are sized for kwok (a model "loads" at once); a real pod
# imports torch and loads the tiny model on the CPU, so the demo gives it a real startup budget,
# and caps the generated tokens (the random model rarely emits an end token).
REAL_NODE_SPEC = {
    "imagePullPolicy": "Never",  # imported into the node's containerd: no registry is asked
    "nodeSelector": dict(NODE_SELECTOR),
    "tolerations": [dict(TOLERATION)],
    "resources": {"memory": "3Gi"},
    "inference": {"maxNewTokens": 64, "timeoutSeconds": 300},
    "rollout": {"modelLoadTimeoutSeconds": 180, "progressDeadlineSeconds": 300, "settleSeconds": 3,
                "healthCheck": {"timeoutSeconds": 5},
                "qualityGate": {"goldenPages": {"configMapName": GOLDEN}, "maxMeanDistance": 0.02,
                                "maxPageDistance": 0.1, "maxNewTokens": GATE_TOKENS, "timeoutSeconds": 60}},
}


def load_example() -> dict:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d.get("kind") == "OcrService"]
    if not docs:
        raise DemoError(f"{EXAMPLE.relative_to(ROOT)} holds no OcrService")
    obj = docs[0]
    obj["metadata"]["namespace"] = NAMESPACE
    return obj


def operator_argv(liveness_port: int) -> list[str]:
    return [PY, "-m", "ocr_operator", "--namespace", NAMESPACE, "--liveness-host", "127.0.0.1",
            f"--liveness-port={liveness_port}", "--metrics-port=0"]


def golden_configmap() -> dict:
    """The golden pages: hack/sample-page.py's page drawn at GOLDEN_PAGES' sizes, one binaryData key each."""
    data = {}
    for name, (width, height) in GOLDEN_PAGES.items():
        out = DEMO_DIR / name
        subprocess.run([PY, str(ROOT / "hack" / "sample-page.py"), str(out), "--width", str(width),
                        "--height", str(height)], check=True, capture_output=True, cwd=ROOT)
        data[name] = base64.b64encode(out.read_bytes()).decode()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": GOLDEN, "namespace": NAMESPACE},
            "binaryData": data}


def tiny_model_b() -> str:
    """Tiny model B (seed 1: the image's model A with other random weights) under MODELS_DIR, a copy
    of the one in the cache of tiny models (ocr_server_testing.tiny_cache: written once per version
    of its generator); the volume's sub-folder that holds it at <MODEL_NAME>."""
    from ocr_server_testing import tiny_cache

    sub = f"tiny-b-{tiny_cache.generator_hash()[:12]}"
    if not (MODELS_DIR / sub / ".complete").exists():
        shutil.rmtree(MODELS_DIR, ignore_errors=True)  # older generator versions too
        try:
            tiny_cache.copy_to(MODELS_DIR / sub / MODEL_NAME, seed=1)
        except RuntimeError as exc:
            raise DemoError(f"tiny model B: {exc}") from None
        (MODELS_DIR / sub / ".complete").write_text("")
    # The server runs as uid 10001: it must read what this process wrote (hostPath keeps the modes).
    for path in [MODELS_DIR, *MODELS_DIR.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return sub


def model_b_patch(sub: str) -> dict:
    """The merge patch of step 6: model B from the claim; null drops step 5's spec.model.path (the CRD
    refuses path and pvc together)."""
    return {"spec": {"model": {"path": None, "pvc": {"claimName": MODEL_B_CLAIM, "subPath": sub}}}}


def model_b_claim(cluster) -> None:
    """A ReadOnlyMany PVC bound (claimRef: no provisioner here) to a hostPath PV of MODELS_DIR."""
    pv = json.loads(kubectl(cluster, "get", "pv", MODEL_B_PV, "--ignore-not-found", "-o", "json") or "null")
    if pv and (pv["spec"].get("hostPath", {}).get("path") != str(MODELS_DIR)
               or pv["status"].get("phase") not in ("Available", "Bound")):
        kubectl(cluster, "delete", "pvc", MODEL_B_CLAIM, "-n", NAMESPACE, "--ignore-not-found", "--timeout=60s")
        kubectl(cluster, "delete", "pv", MODEL_B_PV, "--timeout=60s")
    kubectl(cluster, "apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": MODEL_B_PV},
         "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadOnlyMany"],
                  "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                  "hostPath": {"path": str(MODELS_DIR), "type": "Directory"},
                  "claimRef": {"namespace": NAMESPACE, "name": MODEL_B_CLAIM}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": MODEL_B_CLAIM, "namespace": NAMESPACE},
         "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "", "volumeName": MODEL_B_PV,
                  "resources": {"requests": {"storage": "1Gi"}}}}]))
    wait(lambda: get_json(cluster, "pvc", MODEL_B_CLAIM, "-n", NAMESPACE)["status"].get("phase") == "Bound",
         30, f"PVC {MODEL_B_CLAIM} Bound to PV {MODEL_B_PV}")
