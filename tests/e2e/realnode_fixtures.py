"""Fixtures for the product on the REAL node (`real-node-0`): the built images, the tiny model on a
PersistentVolume, OcrServices whose pods really run, and a client that talks to them.

- `real_node` (session): the cluster's real node, or a skip naming why there is none.
- `product_images` (session): `localcluster/imagebuild.py`'s three images (built from the real
  Dockerfiles, cached), each imported into the node's containerd the first time a test asks for it
  (`product_images.on_node("server")`); containerd's store outlives clusters, so this is once per machine.
- `tiny_model_volume` (session): the tiny random model (`python -m ocr_server_testing.tiny_model`, the
  copy images.py keeps per generator version) in `<cluster workdir>/realnode-volume/weights/<MODEL_NAME>`,
  the layout of a weights cache.
- `model_pvc` (function): a hostPath PersistentVolume of that directory bound (claimRef) to a
  ReadOnlyMany PVC `tiny-model` in the test's namespace; `spec.model.pvc` mounts it with
  `subPath: weights` at the server's CACHE_DIR. `tiny_model_claim(cluster, namespace, volume)`
  does the same for a fixture of another scope (a module sharing one OcrService).
- `real_ocrservice(name, image, **spec)`: an OcrService manifest whose pods select and tolerate
  the real node, with short probe settings, small CPU-sized inference settings, no warm-up
  (`WARMUP=0` in `spec.env`, merged with the test's own entries) and `imagePullPolicy: Never`
  (images are imported: nothing is ever pulled, no registry is asked).
- `OcrClient`: POST /v1/ocr and GET /metrics through a Service's ClusterIP from the host (never
  through a proxy: the machine's proxy variables must not route a Service address anywhere else).

Exposed to the e2e tier by one import line at the bottom of tests/e2e/conftest.py.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from localcluster import pki
from localcluster.nodeconfig import NODE_SELECTOR, TOLERATION
from localcluster.sharing import file_lock
from localcluster.waiting import wait_for
from tests.conftest import WORKER_THREADS
from tests.server import samples

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL_NAME = "deepseek-ai/DeepSeek-OCR-2"  # the server's default MODEL_NAME (Dockerfile.server)
VOLUME_SUBPATH = "weights"
PVC_NAME = "tiny-model"
API_KEY = "realnode-test-key-0001"


@pytest.fixture(scope="session")
def real_node(cluster):
    """The cluster's real node, started on first use; a skip naming why where there is none."""
    if cluster.external:
        pytest.skip(f"no real node in this cluster: {cluster.real_node_skipped}")
    if cluster.real_node is None:
        node = cluster.add_real_node()
        if node is None:
            pytest.skip(f"no real node in this cluster: {cluster.real_node_skipped}")
        print(f"\nreal node Ready {node.ready_seconds:.1f}s after its start")
    return cluster.real_node


class ProductImages:
    """The images built from Dockerfile.server / Dockerfile.operator, imported into the node on demand."""

    def __init__(self, cluster, images) -> None:
        self.cluster = cluster
        self.images = images
        self.import_seconds: dict[str, float] = {}

    def on_node(self, kind: str) -> str:
        """The ref of `server`, `server_tiny` or `operator`, present in the real node's containerd."""
        ref = getattr(self.images, kind)
        # Two workers sharing the node would otherwise both send the same image.
        with file_lock(Path(self.cluster.workdir) / "locks" / "images.lock"):
            if not self.cluster.has_image(ref):
                t0 = time.monotonic()
                self.images.import_into(self.cluster, ref)
                self.import_seconds[kind] = time.monotonic() - t0
                print(f"\nimported {ref} into the real node in {self.import_seconds[kind]:.1f}s")
        return ref


@pytest.fixture(scope="session")
def product_images(cluster, real_node) -> ProductImages:
    from localcluster.imagebuild import ensure_images

    t0 = time.monotonic()
    images = ensure_images(log=lambda line: print(f"images: {line}"))
    print(f"\nproduct images ready in {time.monotonic() - t0:.1f}s: {', '.join(images.refs)}")
    return ProductImages(cluster, images)


@pytest.fixture(scope="session")
def tiny_model_volume(cluster, real_node) -> Path:
    """The volume's root directory; the model sits at weights/<the server's default MODEL_NAME>."""
    root = Path(cluster.workdir) / "realnode-volume"
    model = root / VOLUME_SUBPATH / DEFAULT_MODEL_NAME
    with file_lock(Path(cluster.workdir) / "locks" / "volume.lock"):  # workers sharing the cluster share it
        if not (model / "config.json").exists():
            from localcluster.imagebuild import ensure_tiny_model

            model.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(REPO / ensure_tiny_model(log=print), model, ignore=shutil.ignore_patterns(".complete"))
        # The server runs as uid 10001: it must read what root wrote here (hostPath keeps the modes).
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
    return root


@pytest.fixture
def model_pvc(cluster, namespace, tiny_model_volume) -> str:
    """A PVC in the test's namespace bound to a hostPath PV of the tiny model volume; its name."""
    with tiny_model_claim(cluster, namespace, tiny_model_volume) as name:
        yield name


def hostpath_claim(cluster, namespace: str, root: Path, name: str, access_mode: str, pv: str) -> str:
    """A PersistentVolume of the host folder `root` bound to the claim `name` in `namespace` (no
    provisioner here: the PV names its claim); returns the PV's name (cut to 63 characters)."""
    pv = pv[:63]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": [access_mode],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                 "hostPath": {"path": str(root), "type": "Directory"},
                 "claimRef": {"namespace": namespace, "name": name}}}))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
        "spec": {"accessModes": [access_mode], "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}}}))
    return pv


@contextlib.contextmanager
def tiny_model_claim(cluster, namespace: str, tiny_model_volume: Path) -> Iterator[str]:
    """`model_pvc` for any scope: the PVC bound in `namespace`, its name; the PV deleted after."""
    pv = hostpath_claim(cluster, namespace, tiny_model_volume, PVC_NAME, "ReadOnlyMany", f"tiny-model-{namespace}")
    wait_for(lambda: ((cluster.get_object("pvc", PVC_NAME, namespace) or {}).get("status") or {}).get("phase") == "Bound", timeout=30, message=f"PVC {PVC_NAME} Bound to PV {pv}")
    try:
        yield PVC_NAME
    finally:
        cluster.kubectl("delete", "pv", pv, "--wait=false", check=False)


# No test times a pod's first request, so the pods skip the warm-up: its generations on a page of
# each shape cost every pod start CPU seconds, and the real-node tests start dozens of pods.
NO_WARMUP = {"name": "WARMUP", "value": "0"}
# The thread settings of the suite's other torch processes (tests/conftest.py), as env entries: the
# node's pods share 2 cores with the test workers, and a pool as wide as the machine only
# oversubscribes them.
POD_THREADS = [{"name": key, "value": value} for key, value in WORKER_THREADS.items()]


def paced_steps_env(step_pause: float) -> dict[str, str]:
    """The server env of the test image's fault plugin pausing `step_pause` s after each decode
    step (as a slower accelerator would): requests stay long while the pod's CPU mostly waits."""
    return {"SERVER_PLUGINS": "ocr_server_testing.faults", "OCR_STEP_PAUSE_SEC": str(step_pause)}


def real_ocrservice(name: str, image: str, *, warmup: bool = False, **spec) -> dict:
    """An OcrService for the real node: its pods select and tolerate it and run `image` on the CPU.

    `spec.env` holds `WARMUP=0` and POD_THREADS (`OMP_NUM_THREADS=1`) beside the test's own
    entries (a test's own value of any wins); `warmup=True` leaves the server's default (warm up)."""
    env = list(spec.pop("env", None) or [])
    named = {e.get("name") for e in env}
    defaults = POD_THREADS + ([] if warmup else [NO_WARMUP])
    env[:0] = [dict(e) for e in defaults if e["name"] not in named]
    if env:
        spec["env"] = env
    base = {
        "image": image,
        "imagePullPolicy": "Never",
        "replicas": 1,
        "nodeSelector": dict(NODE_SELECTOR),
        "tolerations": [dict(TOLERATION)],
        "resources": {"gpus": 1, "cpu": "100m", "memory": "2Gi"},
        "inference": {"maxNewTokens": 8, "timeoutSeconds": 120, "concurrency": 2},
        "rollout": {"healthCheck": {"periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 3},
                    "modelLoadTimeoutSeconds": 240, "progressDeadlineSeconds": 300, "settleSeconds": 2,
                    "maxRestarts": 1, "unschedulableGraceSeconds": 30},
        "terminationGracePeriodSeconds": 3,
    }
    for key, value in spec.items():
        base[key] = {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return {"apiVersion": "ocr.causalflow.dev/v1alpha1", "kind": "OcrService", "metadata": {"name": name},
            "spec": base}


class OcrClient:
    """HTTP(S) to an OcrService's Service from the host, by ClusterIP (kube-proxy's rules route it)."""

    def __init__(self, cluster_ip: str, port: int, *, https: bool = False, ca: Path | None = None,
                 server_name: str | None = None, api_key: str | None = None, timeout: float = 120) -> None:
        self.base = f"{'https' if https else 'http'}://{cluster_ip}:{port}"
        self.server_name = server_name
        # Plain HTTP verifies nothing: no client loads the CA bundle for it (25 ms of CPU each).
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca)) if ca else https
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=self.base, verify=verify, timeout=timeout, trust_env=False)

    def _ext(self) -> dict:
        # The certificate names the Service's DNS name; we connect to its ClusterIP (no cluster DNS here).
        return {"sni_hostname": self.server_name} if self.server_name else {}

    def ocr(self, png: bytes, headers: dict | None = None, **data) -> httpx.Response:
        return self.client.post("/v1/ocr", files={"file": ("page.png", png, "image/png")}, data=data,
                                headers={**self.headers, **(headers or {})}, extensions=self._ext())

    def get(self, path: str, headers: dict | None = None) -> httpx.Response:
        return self.client.get(path, headers={**self.headers, **(headers or {})}, extensions=self._ext())

    def close(self) -> None:
        self.client.close()


def wait_service_connects(cluster, namespace: str, name: str, timeout: float = 30) -> None:
    """Until the Service's cluster IP takes a TCP connection. Ready is the pod's; kube-proxy
    programs the Service's rules for it a moment later, and a request sent in between is refused
    (`Connection refused`), which a test must not read as the server's answer."""
    address = service_address(cluster, namespace, name)

    def connects() -> bool:
        try:
            socket.create_connection(address, timeout=2).close()
            return True
        except OSError:
            return False

    wait_for(connects, timeout=timeout, interval=0.2, message=f"Service {name} takes connections")


def service_address(cluster, namespace: str, name: str) -> tuple[str, int]:
    """The Service's cluster IP and its first port."""
    svc = cluster.require_object("service", name, namespace)
    return svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["port"]


def service_client(cluster, namespace: str, name: str, **kwargs) -> OcrClient:
    return OcrClient(*service_address(cluster, namespace, name), **kwargs)


def server_pods(cluster, namespace: str, name: str) -> list[dict]:
    return cluster.list_objects("pods", namespace, f"app.kubernetes.io/instance={name}")


def pod_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def tls_secret(cluster, namespace: str, secret: str, dns_name: str, workdir: Path) -> Path:
    """A self-signed kubernetes.io/tls Secret naming `dns_name`; returns the certificate (the client's CA)."""
    cert, key = pki.self_signed(workdir, "tls", dns_name, san=f"DNS:{dns_name}", days=1)
    cluster.kubectl("create", "secret", "tls", secret, "-n", namespace, f"--cert={cert}", f"--key={key}")
    return cert


class SteadyClient(threading.Thread):
    """OCR requests through `client` one at a time until stopped (or `max_requests` / `max_seconds`),
    each on a new page (no result-cache hit), `pause` seconds apart: every outcome kept. An answer
    counts as good when it is a 200 and, with `visual_tokens`, reports that many visual tokens.
    `revisions` counts the good answers by the model revision they report (model.revision: which
    weights answered)."""

    def __init__(self, client: OcrClient, *, first_seed: int = 0, max_new_tokens: int | None = None,
                 visual_tokens: int | None = None, pause: float = 0.1, max_requests: int = 400,
                 max_seconds: float = 360) -> None:
        super().__init__(daemon=True)
        self.client, self.first_seed, self.pause = client, first_seed, pause
        self.data = {"max_new_tokens": str(max_new_tokens)} if max_new_tokens else {}
        self.visual_tokens, self.max_requests, self.max_seconds = visual_tokens, max_requests, max_seconds
        self.stop_event = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.revisions: Counter[str] = Counter()

    def _good(self, r: httpx.Response) -> bool:
        if r.status_code != 200:
            return False
        return self.visual_tokens is None or r.json()["usage"]["visual_tokens"] == self.visual_tokens

    def run(self) -> None:
        deadline = time.monotonic() + self.max_seconds
        for i in range(self.max_requests):
            if self.stop_event.is_set() or time.monotonic() > deadline:
                return
            try:
                r = self.client.ocr(samples.png(320, 240, seed=self.first_seed + i), **self.data)
                if self._good(r):
                    self.revisions[r.json()["model"]["revision"]] += 1
                    self.ok += 1
                else:
                    self.failures.append(f"#{i}: HTTP {r.status_code} {r.text[:200]}")
            except Exception as exc:  # noqa: BLE001 - a failed request is the finding
                self.failures.append(f"#{i}: {type(exc).__name__}: {exc}")
            time.sleep(self.pause)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(timeout=150)
        self.client.close()
