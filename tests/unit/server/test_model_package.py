"""`python -m ocr_server.package DIR --tag REF`: a weights directory as an OCI image (buildah, a
throwaway storage), its checksum list inside, and the server verifying against that list."""

from __future__ import annotations

import hashlib
import json
import subprocess
import tarfile

import pytest

from ocr_server import package
from ocr_server.runtime import checksums


def weights(tmp_path):
    d = tmp_path / "weights"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"model_type": "tiny"}')
    (d / "sub" / "w.safetensors").write_bytes(b"w" * 100)
    for p in (d, d / "sub"):
        p.chmod(0o755)
    return d


@pytest.fixture
def buildah(tmp_path):
    root = tmp_path / "storage"
    return ["buildah", "--root", str(root), "--runroot", str(tmp_path / "run"), "--storage-driver", "vfs"]


def layer_files(buildah, tmp_path, tag: str) -> dict[str, bytes]:
    """The image's one layer, as pushed to an OCI archive: path -> content."""
    archive = tmp_path / "image.tar"
    subprocess.run([*buildah, "push", tag, f"oci-archive:{archive}"], check=True, capture_output=True)
    with tarfile.open(archive) as outer:
        index = json.load(outer.extractfile("index.json"))
        blob = lambda d: outer.extractfile("blobs/sha256/" + d.split(":")[1])  # noqa: E731
        manifest = json.load(blob(index["manifests"][0]["digest"]))
        assert len(manifest["layers"]) == 1
        with tarfile.open(fileobj=blob(manifest["layers"][0]["digest"])) as layer:
            return {m.name.lstrip("./"): layer.extractfile(m).read() for m in layer if m.isfile()}


def test_the_image_holds_the_weights_at_its_root_and_their_checksum_list(tmp_path, buildah, capsys):
    d = weights(tmp_path)
    assert package.main([str(d), "--tag", "localhost/weights:t", "--buildah", " ".join(buildah)]) == 0
    files = layer_files(buildah, tmp_path, "localhost/weights:t")
    assert set(files) == {"config.json", "sub/w.safetensors", checksums.FILE_NAME}
    assert json.loads(files[checksums.FILE_NAME]) == {
        "config.json": hashlib.sha256(b'{"model_type": "tiny"}').hexdigest(),
        "sub/w.safetensors": hashlib.sha256(b"w" * 100).hexdigest()}


def test_a_file_the_server_could_not_read_is_refused_naming_it(tmp_path, buildah, capsys):
    d = weights(tmp_path)
    (d / "sub" / "w.safetensors").chmod(0o600)
    assert package.main([str(d), "--tag", "localhost/weights:t", "--buildah", " ".join(buildah)]) == 1
    assert "sub/w.safetensors" in capsys.readouterr().err


def test_a_directory_without_config_json_is_refused(tmp_path, buildah, capsys):
    d = weights(tmp_path)
    (d / "config.json").unlink()
    assert package.main([str(d), "--tag", "localhost/weights:t", "--buildah", " ".join(buildah)]) == 1
    assert "config.json is missing" in capsys.readouterr().err


def test_the_server_verifies_against_the_list_inside_the_model_directory(tmp_path):
    d = weights(tmp_path)
    (d / checksums.FILE_NAME).write_text(json.dumps({"sub/w.safetensors": "0" * 64}))
    with pytest.raises(checksums.ChecksumError, match="sub/w.safetensors"):
        checksums.verify_configured(d, None)


def test_the_operators_list_wins_over_the_one_inside_the_model_directory(tmp_path):
    d = weights(tmp_path)
    (d / checksums.FILE_NAME).write_text(json.dumps({"sub/w.safetensors": "0" * 64}))
    config = tmp_path / "cfg" / "config.yaml"
    config.parent.mkdir()
    (config.parent / checksums.FILE_NAME).write_text(
        json.dumps({"config.json": hashlib.sha256(b'{"model_type": "tiny"}').hexdigest()}))
    assert checksums.verify_configured(d, str(config)) == 1


def test_the_same_weights_package_to_the_same_image_so_a_rebuild_is_no_new_revision(tmp_path, buildah):
    d = weights(tmp_path)
    first = package.build(d, "localhost/weights:a", buildah)
    for p in d.rglob("*"):  # a copy made later: other mtimes, the same bytes
        p.touch()
    assert package.build(d, "localhost/weights:b", buildah) == first
