"""The three images built from the real Dockerfiles (localcluster/imagebuild.py): config and a real run.

No node is involved: these read the built images' OCI config with `buildah inspect` and run the
images' own entry points in throwaway containers under runc, with no network (loopback only).
`ensure_images()` builds what is missing (cold: the server image's torch install; warm: nothing).
"""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from ocr_server.runtime.config import ENV_KEYS
from localcluster import imagebuild as img
from localcluster.buildah import Buildah, state_dir
from tests import locks

# A cold first build (torch, 6 GB of layers) takes well over pytest's default 900 s here.
pytestmark = [pytest.mark.realnode, pytest.mark.slow, pytest.mark.timeout(3600)]


@pytest.fixture(scope="module")
def built() -> img.Images:
    return img.ensure_images()


@pytest.fixture(scope="module")
def buildah() -> Buildah:
    return Buildah(state_dir())


def env_of(config: dict) -> dict[str, str]:
    return dict(e.split("=", 1) for e in config.get("Env") or ())


def test_refs_are_content_addressed_and_each_streams_as_a_docker_archive(built):
    assert built.server.startswith("localhost/causalflow-ocr-server:")
    assert built.server_tiny.startswith("localhost/causalflow-ocr-server-tiny:")
    assert built.operator.startswith("localhost/causalflow-ocr-operator:")
    assert len({ref.rpartition(":")[2] for ref in built.refs}) == 3
    # What the real node's import reads (the operator: the server images stream 6 GB the same way).
    with built.stream(built.operator) as pipe, tarfile.open(fileobj=pipe, mode="r|") as tar:
        members = {}
        for member in tar:
            members[member.name] = member.size
            if member.name == "manifest.json":
                manifest = json.load(tar.extractfile(member))
    assert manifest[0]["RepoTags"] == [built.operator]
    assert all(layer in members for layer in manifest[0]["Layers"])
    assert sum(members.values()) > 10 * 2**20
    with pytest.raises(ValueError):
        with built.stream("localhost/something-else:1"):
            pass


def test_an_archive_file_is_written_for_importing_elsewhere(built):
    archive = built.archive(built.operator)
    assert archive.is_file() and archive.stat().st_size > 10 * 2**20, archive
    with pytest.raises(ValueError):
        built.archive("localhost/something-else:1")


def test_operator_image_config_is_non_root_with_its_entrypoint_and_liveness_port(built, buildah):
    config = buildah.config(built.operator)
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["python", "-m", "ocr_operator"] and config["Cmd"] == ["--all-namespaces"]
    assert env_of(config)["OCR_OPERATOR_LIVENESS_PORT"] == "8080" and "8080/tcp" in config["ExposedPorts"]


def test_server_images_config_user_entrypoint_port_and_model_location(built, buildah):
    for ref in (built.server, built.server_tiny):
        config = buildah.config(ref)
        env = env_of(config)
        assert config["User"] == "10001:10001", ref
        assert config["Entrypoint"] == ["python", "-m", "ocr_server"], ref
        assert "8080/tcp" in config["ExposedPorts"], ref
        # no server setting in the image's env: it would override the operator's ConfigMap
        assert not set(env) & set(ENV_KEYS), (ref, sorted(set(env) & set(ENV_KEYS)))
        assert env["HF_HUB_OFFLINE"] == "1" and "PIP_NO_CACHE_DIR" not in env, ref


def test_operator_image_runs_its_help_as_non_root(built, buildah):
    result = buildah.run_image(built.operator, "sh", "-c", "id -u && python -m ocr_operator --help", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    uid, _, usage = result.stdout.partition("\n")
    assert uid == "65532"
    assert "usage: ocr-operator" in usage and "--all-namespaces" in usage


@pytest.mark.parametrize(("image", "lock", "own"), [
    ("operator", locks.OPERATOR_LOCK, ("operator", "limits")),
    ("server", locks.SERVER_LOCK, ("server", "limits")),
])
def test_an_image_holds_exactly_its_lock_and_the_two_packages_of_the_repository(built, buildah, image, lock, own):
    """Each Dockerfile installs its lock (hash-checked), pip check passing: nothing more, nothing newer,
    beside the repository's two packages it copies and what `python -m venv` seeds."""
    result = buildah.run_image(getattr(built, image), "python", "-c", locks.INSTALLED_CODE, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    here = locks.installed_from(result.stdout)
    seeds = {name: here[name] for name in locks.VENV_SEEDS & here.keys()}
    assert locks.drift(here, locks.expected_here(lock) | locks.project_versions(*own) | seeds) == {}


def test_tiny_server_image_carries_the_model_at_cache_dir_model_name_and_the_plain_one_does_not(built, buildah):
    probe = "test -f /models/deepseek-ai/DeepSeek-OCR-2/config.json && echo present || echo absent"
    assert buildah.run_image(built.server_tiny, "sh", "-c", probe, timeout=120).stdout.strip() == "present"
    assert buildah.run_image(built.server, "sh", "-c", probe, timeout=120).stdout.strip() == "absent"


def test_tiny_server_image_starts_the_server_and_answers_health_on_loopback(built, buildah):
    """The image's own entry point, defaults only (no env, no volume): the baked tiny model loads on
    the CPU and /health turns 200. curl runs inside the container, on its own loopback."""
    script = (
        "python -m ocr_server > /tmp/server.log 2>&1 & "
        "for i in $(seq 1 240); do "
        "  if curl -fsS http://127.0.0.1:8080/health; then exit 0; fi; sleep 1; "
        "done; cat /tmp/server.log; exit 1"
    )
    result = buildah.run_image(built.server_tiny, "sh", "-c", script, timeout=400)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    health = json.loads(result.stdout.strip().splitlines()[-1])
    assert health["status"] == "ok" and health["tiny"] is True and health["device"] == "cpu", health


# Triton's own build of a kernel launcher (triton.runtime.build._build: its compiler lookup, Python's
# headers), on a module as small as a launcher's, imported afterwards.
LAUNCHER_PROBE = r'''
import importlib.util, inspect, os, tempfile
from triton.runtime import build
SRC = """#include <Python.h>
static struct PyModuleDef probe = {PyModuleDef_HEAD_INIT, "launcher_probe", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_launcher_probe(void) { return PyModule_Create(&probe); }
"""
with tempfile.TemporaryDirectory() as d:
    src = os.path.join(d, "launcher_probe.c")
    with open(src, "w") as f:
        f.write(SRC)
    given = {"library_dirs": [], "include_dirs": [], "libraries": [], "ccflags": []}
    accepted = inspect.signature(build._build).parameters
    so = build._build("launcher_probe", src, d, **{k: v for k, v in given.items() if k in accepted})
    spec = importlib.util.spec_from_file_location("launcher_probe", so)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    print("launcher built and imported")
'''


def test_the_server_image_can_build_tritons_kernel_launchers(built, buildah):
    """On a GPU, torch.compile's kernels (flex attention in the decode step, DECODE_COMPILE) run
    through launchers Triton compiles at run time with the system's C compiler against Python's
    headers; the CUDA runtime base image has neither, and without them each compile fails and the
    server falls back to its slower paths."""
    result = buildah.run_image(built.server, "python", "-c", LAUNCHER_PROBE, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "launcher built and imported"


def test_no_working_container_or_its_mount_is_left_behind(built, buildah):
    """A build or a throwaway run that leaves a working container keeps an overlay mount on the
    machine; ensure_images removes those of killed builds, and nothing here leaves one."""
    containers = json.loads(buildah.run("containers", "--json") or "null") or []
    assert containers == [], [c.get("containername") for c in containers]
    merged = [line for line in Path("/proc/mounts").read_text().splitlines()
              if str(state_dir()) in line and "/merged " in line]
    assert merged == [], merged


def test_preload_fills_the_node_image_store_once_and_leaves_nothing_running(built, tmp_path, monkeypatch):
    """The set-up's preload (localcluster/imagestore.py), on an image store of its own (another
    cache root, so the real node of this run keeps its store and its slot): the operator image is
    imported, a second preload finds it in the store and imports nothing, and no containerd,
    mount or socket of the preload is left."""
    from localcluster import machine
    from localcluster.imagestore import preload
    from localcluster.realnode import node_binaries_dir

    bin_dir = node_binaries_dir(build=False)
    monkeypatch.setenv("CAUSALFLOW_CACHE", str(tmp_path))
    lines: list[str] = []
    assert preload(built, ["operator"], bin_dir, log=lines.append) == [built.operator], lines
    assert preload(built, ["operator"], bin_dir, log=lines.append) == [], lines
    assert (tmp_path / "containerd-root" / "io.containerd.content.v1.content").is_dir()
    assert not (tmp_path / "realnode.owner").exists()
    assert not [m for m in machine.mount_points() if m.startswith(str(tmp_path)) or "/cfo-store-" in m]
    assert not machine.processes_under("/cfo-store-"), "a preload containerd still runs"


def test_preload_leaves_a_store_alone_while_a_cluster_holds_the_real_node(built, tmp_path, monkeypatch):
    from localcluster.imagestore import preload
    from localcluster.realnode import node_binaries_dir

    bin_dir = node_binaries_dir(build=False)
    monkeypatch.setenv("CAUSALFLOW_CACHE", str(tmp_path))
    (tmp_path / "realnode.owner").write_text(json.dumps({"workdir": "/tmp/some-cluster", "pid": os.getpid()}))
    lines: list[str] = []
    assert preload(built, ["operator"], bin_dir, log=lines.append) == []
    assert any("in use by the cluster in /tmp/some-cluster" in line for line in lines), lines
    assert not (tmp_path / "containerd-root").exists()
