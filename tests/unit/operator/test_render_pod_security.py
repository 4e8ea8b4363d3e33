"""Server pods state their user, group and disk use themselves, instead of relying on the image."""

from __future__ import annotations

from pathlib import Path

from ocr_operator.ocrservice.render import deployment as D
from ocr_operator.ocrservice.render import render_all

from tests.unit.operator.helpers import owner, parsed

ROOT = Path(__file__).resolve().parents[3]
MI = {"Mi": 1, "Gi": 1024}


def _mebibytes(quantity: str) -> int:
    return int(quantity[:-2]) * MI[quantity[-2:]]


def _pod(spec: dict | None = None) -> dict:
    body = owner(spec)
    return render_all(body, parsed(body)).objects["Deployment"]["spec"]["template"]["spec"]


def test_server_pods_run_as_the_images_uid_and_gid_with_the_pvc_group_set():
    sc = _pod({"model": {"pvc": {"claimName": "weights"}}})["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) == (10001, 10001, 10001)
    assert sc["runAsNonRoot"] is True and sc["seccompProfile"] == {"type": "RuntimeDefault"}
    # The model directory is not chowned file by file on every start.
    assert sc["fsGroupChangePolicy"] == "OnRootMismatch"


def test_the_pods_uid_is_the_one_dockerfile_server_creates_and_runs_as():
    dockerfile = (ROOT / "Dockerfile.server").read_text()
    assert f"USER {D.SERVER_UID}:{D.SERVER_GID}" in dockerfile
    assert f"--uid {D.SERVER_UID}" in dockerfile and f"--gid {D.SERVER_GID}" in dockerfile


def test_server_container_requests_and_limits_ephemeral_storage_that_covers_tmp():
    pod = _pod()
    [container] = pod["containers"]
    request = container["resources"]["requests"]["ephemeral-storage"]
    limit = container["resources"]["limits"]["ephemeral-storage"]
    assert request == limit
    [tmp] = [v for v in pod["volumes"] if v["name"] == "tmp"]
    # /tmp filled to its sizeLimit still leaves room for the container's logs before eviction.
    assert _mebibytes(limit) >= _mebibytes(tmp["emptyDir"]["sizeLimit"]) + D.LOG_STORAGE_ALLOWANCE_MI
