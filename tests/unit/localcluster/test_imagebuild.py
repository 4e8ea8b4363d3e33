"""The image harness's pure parts (localcluster/imagebuild.py): what an image's content tag covers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from localcluster import dockerfile, machine
from localcluster import imagebuild as img
from localcluster.buildah import DEPENDENCY_LAYER_PEAK_GB, Buildah, explain_build_failure

ROOT = Path(__file__).resolve().parents[3]

DOCKERFILE = """\
ARG BASE_IMAGE=python:3.12.8-slim
FROM ${BASE_IMAGE} AS build
COPY app/pyproject.toml app/pyproject.toml
COPY --from=build /opt/venv /opt/venv
COPY --chown=1:1 app/src app/src
ARG BAKE=
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=bind,source=${BAKE:-app},target=/tmp/b true
"""


def context(tmp_path: Path) -> Path:
    (tmp_path / "app" / "src" / "__pycache__").mkdir(parents=True)
    (tmp_path / "app" / "pyproject.toml").write_text("[project]\n")
    (tmp_path / "app" / "src" / "main.py").write_text("print(1)\n")
    (tmp_path / "app" / "src" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{}")
    (tmp_path / "unrelated.txt").write_text("x")
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    return tmp_path


def test_copy_sources_are_copies_and_context_bind_mounts_with_args_expanded():
    assert dockerfile.copy_sources(DOCKERFILE, {}) == ["app/pyproject.toml", "app/src", "app"]
    assert dockerfile.copy_sources(DOCKERFILE, {"BAKE": "weights"})[-1] == "weights"


def test_the_content_hash_follows_copied_files_args_and_base_but_not_other_files(tmp_path):
    ctx = context(tmp_path)
    df = ctx / "Dockerfile"
    first = dockerfile.content_hash(df, ctx, {}, "base-id-1")
    (ctx / "unrelated.txt").write_text("changed")
    (ctx / "app" / "src" / "__pycache__" / "main.cpython-311.pyc").write_bytes(b"\1")
    assert dockerfile.content_hash(df, ctx, {}, "base-id-1") == first
    (ctx / "app" / "src" / "main.py").write_text("print(2)\n")
    second = dockerfile.content_hash(df, ctx, {}, "base-id-1")
    assert second != first
    assert dockerfile.content_hash(df, ctx, {}, "base-id-2") != second
    baked = dockerfile.content_hash(df, ctx, {"BAKE": "weights"}, "base-id-1")
    assert baked != second
    (ctx / "weights" / "config.json").write_text('{"changed": 1}')
    assert dockerfile.content_hash(df, ctx, {"BAKE": "weights"}, "base-id-1") != baked


def test_the_repository_dockerfiles_hash_their_sources(tmp_path):
    server = dockerfile.copy_sources((ROOT / "Dockerfile.server").read_text(), {"BAKE_MODEL_FROM": "models/x"})
    assert {"server/pyproject.toml", "server/requirements.lock", "limits", "server/ocr_server", "models/x"} <= set(server)
    assert not [src for src in server if "testing" in src]  # the production image holds no test helper
    operator = dockerfile.copy_sources((ROOT / "Dockerfile.operator").read_text(), {})
    assert operator == ["operator/requirements.lock", "limits", "operator/pyproject.toml", "operator/ocr_operator",
                        "operator/ocr_batch_worker"]


def test_archive_names_and_base_tags():
    assert img.archive_name("localhost/causalflow-ocr-server:abc") == "causalflow-ocr-server_abc.tar"
    tag = img.OPERATOR_BASE.tag()
    assert tag.startswith("localhost/causalflow-ocr-base-python:bookworm-") and tag == img.OPERATOR_BASE.tag()
    assert img.SERVER_BASE.tag() != tag


def test_the_ca_bundle_is_the_one_pip_uses_here(tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("pem")
    assert img.ca_bundle({"PIP_CERT": str(bundle)}) == bundle
    assert img.ca_bundle({"PIP_CERT": str(tmp_path / "missing"), "SSL_CERT_FILE": str(bundle)}) == bundle
    assert img.ca_bundle({}) == Path("/etc/ssl/certs/ca-certificates.crt")


def test_the_tiny_model_written_in_two_folders_has_the_same_bytes(tmp_path):
    """The baked-model image is keyed by the model folder's bytes: a folder-dependent byte (an
    absolute path in its README, say) would make every fresh checkout rebuild and re-import it."""
    from ocr_server_testing.tiny_model import write_tiny_model

    a, b = write_tiny_model(tmp_path / "one", layout="official"), write_tiny_model(tmp_path / "elsewhere" / "two", layout="official")
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file()) and files
    assert [f for f in files if (a / f).read_bytes() != (b / f).read_bytes()] == []


def test_pruning_archives_spares_the_repositories_not_built_this_time(tmp_path):
    for name in ("causalflow-ocr-server_old.tar", "causalflow-ocr-server_new.tar",
                 "causalflow-ocr-server-tiny_old.tar", "causalflow-ocr-operator_old.tar"):
        (tmp_path / name).write_bytes(b"x")
    img._prune_archives(tmp_path, {"causalflow-ocr-server_new.tar"}, {"localhost/causalflow-ocr-server"})
    assert sorted(p.name for p in tmp_path.glob("*.tar")) == [
        "causalflow-ocr-operator_old.tar", "causalflow-ocr-server-tiny_old.tar", "causalflow-ocr-server_new.tar"]


def test_the_storage_home_a_killed_build_left_bind_mounted_is_unmounted_and_nothing_else(tmp_path):
    """As the overlay driver leaves it when buildah is killed: storage/overlay mounted on itself."""
    b = Buildah(tmp_path)
    home, other = tmp_path / "storage" / "overlay", tmp_path / "elsewhere"
    home.mkdir(parents=True)
    other.mkdir()
    try:
        for point in (home, other):
            subprocess.run(["mount", "--bind", str(point), str(point)], check=True)
        assert b.release_stale_mounts() == [str(home)]
        points = machine.mount_points()
        assert str(home) not in points and str(other) in points
        assert b.release_stale_mounts() == []  # nothing left: nothing done
    finally:
        for point in (home, other):
            if str(point) in machine.mount_points():
                subprocess.run(["umount", str(point)], check=False)


def test_a_build_that_ran_out_of_disk_says_so_first_with_the_space_it_needs():
    tail = ('buildah bud (server) failed, rc=1; log x:\nError: committing container for step {...}: processing tar '
            'file(write /opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9: no space left on device)')
    explained = explain_build_failure(tail, 1_234_000_000)
    assert explained.startswith("the disk holding buildah's storage ran out of space during the build (1.2 GB free now)")
    assert f"about {DEPENDENCY_LAYER_PEAK_GB} GB" in explained and explained.endswith(tail)


def test_another_image_that_ran_out_of_disk_is_not_told_the_server_images_need():
    tail = "buildah bud (operator) failed, rc=1; log x:\nError: writing blob: no space left on device"
    explained = explain_build_failure(tail, 300_000_000, "operator")
    assert explained.startswith("the disk holding buildah's storage ran out of space during the build (0.3 GB free now): "
                                "building the operator image needs more")
    assert f"{DEPENDENCY_LAYER_PEAK_GB} GB" not in explained and explained.endswith(tail)


def test_any_other_build_failure_is_left_as_buildah_told_it():
    tail = "buildah bud (operator) failed, rc=1; log x:\nERROR: No matching distribution found for kopf==9.9"
    assert explain_build_failure(tail, 10**9) == tail
