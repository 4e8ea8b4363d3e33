"""Weights from an OCI image on the REAL node: spec.model.source.image, an image volume.

The tiny model is packaged by `python -m ocr_server.package` (buildah, the harness's storage) as
three weights images, each imported into the node's containerd (docker-archive, `ctr images
import`, plus the `name@digest` ref a pull would record) and referenced by the digest containerd
reports, with pullPolicy Never (nothing is pulled):
A (tiny model, seed 0), B (seed 1: other random weights, reads differently) and A2 (A's weights
with a line added to its README: another digest, the same outputs). One gated OcrService
(golden pages as in test_realnode_quality_gate.py):

- A becomes Ready (timed), serves OCR, and its pod mounts the image volume read-only at the model
  directory (pod spec, /proc/mounts, a write refused); status.model names A's digest;
- A -> B: the gate reads B's pages far from A's and the revision is rolled back
  (QualityRegression); status.model and `kubectl get ocrs -o wide` still show A's digest;
- A -> A2: the gate passes (distance 0) and A2 is promoted; status.model shows A2's digest.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from localcluster.buildah import Buildah, state_dir
from localcluster.imagebuild import ensure_tiny_model
from localcluster.nodeconfig import image_targets
from localcluster.waiting import wait_for
from ocr_server_testing import tiny_cache
from tests.e2e.realnode_fixtures import (DEFAULT_MODEL_NAME, REPO, pod_ready, real_ocrservice, server_pods,
                                         service_client)
from tests.e2e.test_realnode_quality_gate import GATE_TOKENS, GOLDEN, golden_configmap
from tests.server import samples

pytestmark = [pytest.mark.realnode, pytest.mark.slow]

NAME = "from-image"
CACHE_DIR = "/models"
MODEL_DIR = f"{CACHE_DIR}/{DEFAULT_MODEL_NAME}"


def weights_dir(root: Path, name: str, *, seed: int = 0, readme: str = "") -> Path:
    out = root / name
    if not (out / "config.json").exists():
        if seed:
            tiny_cache.copy_to(out, seed=seed)
        else:
            shutil.copytree(REPO / ensure_tiny_model(log=print), out)
        (out / ".complete").unlink(missing_ok=True)
        if readme:
            with (out / "README.md").open("a") as f:
                f.write(readme)
    for path in [out, *out.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return out


def package_and_import(cluster, weights: Path, repository: str) -> tuple[str, float]:
    """Package `weights` (the product's command), import it into the node; the digest reference."""
    b = Buildah(state_dir())
    tag = f"{repository}:v1"
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "ocr_server.package", str(weights), "--tag", tag,
                    "--buildah", " ".join(b.argv())], cwd=REPO, check=True, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    archive = weights.parent / f"{weights.name}.tar"
    archive.unlink(missing_ok=True)
    b.run("push", tag, f"docker-archive:{archive}:{tag}")
    b.run("rmi", tag)  # built again on every run: nothing piles up in the harness's storage
    node = cluster.real_node
    node.import_image(archive, tag)
    archive.unlink()
    listing = image_targets(node.ctr("images", "ls").stdout)
    digest = listing[tag]
    # The repo digest ref the CRI records for a pulled image (an imported one has none): without it
    # the kubelet finds no `name:tag@digest` ("not present with pull policy of Never"). The refs
    # of earlier runs' digests go, so the node's store keeps one image per repository.
    node.ctr("images", "tag", "--force", tag, f"{repository}@{digest}")
    old = [ref for ref in listing if ref.startswith(f"{repository}@") and ref != f"{repository}@{digest}"]
    if old:
        node.ctr("images", "rm", *old)
    return f"{tag}@{digest}", seconds


def manifest(image: str, reference: str) -> dict:
    return real_ocrservice(
        NAME, image, model={"cacheDir": CACHE_DIR, "source": {"image": {"reference": reference, "pullPolicy": "Never"}}},
        inference={"maxNewTokens": GATE_TOKENS},
        rollout={"qualityGate": {"goldenPages": {"configMapName": GOLDEN}, "maxMeanDistance": 0.02,
                                 "maxPageDistance": 0.1, "maxNewTokens": GATE_TOKENS, "timeoutSeconds": 60}})


def test_weights_from_an_image_volume_serve_read_only_and_an_upgrade_is_gated(
        cluster, namespace, ocr, ocr_operator, product_images, real_node, tmp_path):
    image = product_images.on_node("server")
    root = Path(cluster.workdir) / "weights-images"
    figures: dict[str, float] = {}
    a, figures["package_a_s"] = package_and_import(cluster, weights_dir(root, "a"), "localhost/causalflow-ocr-weights-a")
    b, _ = package_and_import(cluster, weights_dir(root, "b", seed=1), "localhost/causalflow-ocr-weights-b")
    a2, _ = package_and_import(cluster, weights_dir(root, "a2", readme="\nrepackaged\n"),
                               "localhost/causalflow-ocr-weights-a2")
    print(f"\nweights images: {a}, {b}, {a2}")
    ocr.apply(golden_configmap())

    def status() -> dict:
        return (ocr.get("ocrs", NAME) or {}).get("status") or {}

    def settled(reference: str):
        s = status()
        return (s.get("rollout", {}).get("phase") == "Healthy" and s.get("currentRevision") == s.get("desiredRevision")
                == s.get("lastGoodRevision") and s.get("model", {}).get("reference") == reference and s)

    try:
        t0 = time.monotonic()
        ocr.apply(manifest(image, a))
        try:
            ocr.wait_ready(NAME, timeout=300)
        finally:
            for pod in server_pods(cluster, namespace, NAME):
                if not pod_ready(pod):
                    print(json.dumps(pod.get("status"), indent=1)[:3000])
                    print(cluster.kubectl("get", "events", "-n", namespace, check=False).stdout[-3000:])
        figures["ready_from_image_s"] = time.monotonic() - t0
        st = wait_for(lambda: settled(a), timeout=120, message="revision A Healthy")
        assert st["model"] == {"source": "image", "reference": a, "digest": a.rpartition("@")[2]}

        pod = next(p for p in server_pods(cluster, namespace, NAME) if pod_ready(p))
        pod_name = pod["metadata"]["name"]
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "weights")
        assert volume["image"] == {"reference": a, "pullPolicy": "Never"}
        mount = next(m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "weights")
        assert (mount["mountPath"], mount["readOnly"]) == (MODEL_DIR, True)
        mounts = cluster.kubectl("exec", pod_name, "-n", namespace, "--", "python", "-c",
                                 "print(open('/proc/mounts').read())").stdout
        line = next(m for m in mounts.splitlines() if m.split()[1] == MODEL_DIR)
        assert "ro" in line.split()[3].split(","), line
        write = cluster.kubectl("exec", pod_name, "-n", namespace, "--", "python", "-c",
                                f"open('{MODEL_DIR}/x', 'w')", check=False)
        assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr
        logs = cluster.kubectl("logs", pod_name, "-n", namespace).stdout
        assert "file(s) verified" in logs  # the list inside the image

        client = service_client(cluster, namespace, NAME)
        try:
            r = client.ocr(samples.png(320, 240, seed=7))
            assert r.status_code == 200, r.text
        finally:
            client.close()

        ocr.patch("ocrs", NAME, {"spec": {"model": {"source": {"image": {"reference": b}}}}})
        st = wait_for(lambda: (s := status()).get("rollout", {}).get("phase") == "RolledBack"
                      and s.get("failedRevision") and s, timeout=300, interval=1, message="B rolled back")
        print(f"\nB: {st['failedReason']}: {st.get('failedMessage', '')[:200]}")
        assert st["failedReason"] == "QualityRegression", st
        assert st["model"]["digest"] == a.rpartition("@")[2], st["model"]
        wide = cluster.kubectl("get", "ocrs", NAME, "-n", namespace, "-o", "wide").stdout
        print(wide)
        assert a.rpartition("@")[2] in wide and "image" in wide

        t0 = time.monotonic()
        ocr.patch("ocrs", NAME, {"spec": {"model": {"source": {"image": {"reference": a2}}}}})
        st = wait_for(lambda: settled(a2), timeout=300, interval=1, message="A2 promoted")
        figures["gated_upgrade_s"] = time.monotonic() - t0
        assert st["qualityGate"]["phase"] == "Passed", st["qualityGate"]
        assert st["model"]["digest"] == a2.rpartition("@")[2]
    finally:
        ocr.delete("ocrs", NAME)
        print("figures: " + json.dumps({k: round(v, 1) for k, v in figures.items()}))
