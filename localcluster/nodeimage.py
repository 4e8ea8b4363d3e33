"""One-binary container images for the real node, written as docker-archives without any tool.

The node needs a sandbox ("pause") image and the real-node tests need a small image, and no
registry is reachable. A static Go binary is a complete image: one layer holding it, a config whose
entrypoint runs it. The archive is byte-for-byte reproducible (fixed mtimes, sorted JSON), so its
tag is the binary's content hash and an unchanged binary is never imported twice.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path


def image_ref(name: str, binary: Path) -> str:
    """`localhost/causalflow/<name>:<first 12 hex of the binary's sha256>`."""
    return f"localhost/causalflow/{name}:{hashlib.sha256(binary.read_bytes()).hexdigest()[:12]}"


def _tar(members: list[tuple[str, bytes, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def docker_archive(ref: str, binary: Path, entrypoint: list[str], dest: Path) -> Path:
    """Write a docker-archive (what `docker save` writes) of a one-layer image holding `binary`
    at /<its name>, running `entrypoint`; `ctr images import` reads it under the tag `ref`."""
    layer = _tar([(binary.name, binary.read_bytes(), 0o755)])
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"causalflow: static {binary.name}"}],
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]).encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(_tar([(config_name, config, 0o644), (layer_name, layer, 0o644),
                           ("manifest.json", manifest, 0o644)]))
    return dest
