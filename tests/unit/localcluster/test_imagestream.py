"""What an import sends and what it prunes: localcluster/imagestream.py and RealNode's stale refs."""

from __future__ import annotations

import subprocess
import sys
import tarfile

import pytest

from localcluster import imagestream as stream
from localcluster.nodeconfig import stale_refs

MiB = 2**20
LAYERS = {"sha256:" + "a" * 64: 5000 * MiB, "sha256:" + "b" * 64: 1000 * MiB, "sha256:" + "c" * 64: 60 * MiB}
TORCH, DEPS, CODE = LAYERS


def test_manifest_layers_reads_digest_and_size_in_order():
    manifest = {"config": {"digest": "sha256:" + "f" * 64, "size": 10},
                "layers": [{"digest": d, "size": s, "mediaType": "x"} for d, s in LAYERS.items()]}
    assert stream.manifest_layers(manifest) == LAYERS
    assert stream.manifest_layers({}) == {}


def test_held_layers_are_the_manifest_layers_the_store_has():
    assert stream.held_layers(LAYERS, {TORCH, CODE, "sha256:" + "9" * 64}) == {TORCH: LAYERS[TORCH], CODE: LAYERS[CODE]}


@pytest.mark.parametrize("have, thin", [
    ({TORCH, DEPS}, True),    # a code change: 60 of 6060 MiB to send
    ({TORCH}, True),          # 5000 of 6060 held
    ({DEPS, CODE}, False),    # the torch layer is new: most of the image, stream it whole
    (set(), False),           # an empty store (a cold cache)
])
def test_only_new_layers_are_sent_when_the_store_holds_most_of_the_image(have, thin):
    assert stream.worth_thin(LAYERS, have) is thin


def test_an_image_without_layers_is_never_sent_thin():
    assert stream.worth_thin({}, {TORCH}) is False


def test_the_index_names_each_manifest_for_containerd_and_keeps_the_rest():
    index = {"schemaVersion": 2, "manifests": [
        {"digest": "sha256:" + "1" * 64, "size": 7, "annotations": {"org.opencontainers.image.ref.name": "x:1"}}]}
    named = stream.named_index(index, "localhost/causalflow-ocr-server:abc")
    assert named["manifests"][0]["annotations"] == {"org.opencontainers.image.ref.name": "x:1",
                                                    "io.containerd.image.name": "localhost/causalflow-ocr-server:abc"}
    assert "io.containerd.image.name" not in index["manifests"][0]["annotations"]  # the input is left as it was


@pytest.mark.parametrize("digest", ["sha256", "sha256:", "sha256:../../etc", "sha256:a/b", ":abc"])
def test_a_blob_path_is_made_only_from_a_digest(digest):
    with pytest.raises(ValueError):
        stream.blob_name(digest)


def test_a_blob_path_is_under_blobs_by_algorithm():
    assert stream.blob_name("sha256:" + "a" * 64) == "blobs/sha256/" + "a" * 64


LISTING = """\
REF                                   TYPE                                                 DIGEST     SIZE      PLATFORMS   LABELS
localhost/causalflow-ocr-server:new   application/vnd.oci.image.manifest.v1+json           sha256:m2  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
localhost/causalflow-ocr-server:old   application/vnd.docker.distribution.manifest.v2+json sha256:m1  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
localhost/causalflow-ocr-server-tiny:t application/vnd.oci.image.manifest.v1+json           sha256:m3  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:id1                            application/vnd.docker.distribution.manifest.v2+json sha256:m1  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:id2                            application/vnd.oci.image.manifest.v1+json           sha256:m2  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:id3                            application/vnd.oci.image.manifest.v1+json           sha256:m3  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
sha256:id0                            application/vnd.docker.distribution.manifest.v2+json sha256:m0  5.9 GiB   linux/amd64 io.cri-containerd.image=managed
"""


def test_stale_refs_are_the_older_tags_of_the_repository_and_image_ids_no_tag_shares():
    # :old goes with its image id; id0's tag went before (a store pruned without the ids): it goes too.
    assert stale_refs(LISTING, "localhost/causalflow-ocr-server:new") == [
        "localhost/causalflow-ocr-server:old", "sha256:id1", "sha256:id0"]


def test_an_image_id_shared_with_a_kept_tag_stays():
    # The same manifest under the old and the new tag (a rebuild that changed nothing): its id stays.
    listing = LISTING.replace("sha256:m1  5.9", "sha256:m2  5.9")
    assert stale_refs(listing, "localhost/causalflow-ocr-server:new") == ["localhost/causalflow-ocr-server:old", "sha256:id0"]


def test_an_empty_store_has_no_stale_refs():
    assert stale_refs("REF TYPE DIGEST SIZE PLATFORMS LABELS\n", "localhost/x:1") == []


# A writer as `buildah push ... docker-archive:/dev/stdout` is: a tar, then more zero padding than a
# pipe buffer holds (1 MiB), so a reader that stops at the archive's end would break its last write.
TAR_WRITER = """
import io, sys, tarfile
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w") as tar:
    data = b"{}"
    info = tarfile.TarInfo("manifest.json"); info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
out = open("/dev/stdout", "wb", buffering=0)  # as buildah writes: a broken pipe is an error it reports
out.write(buf.getvalue())
for _ in range(16):
    out.write(bytes(2**16))
"""


def test_reading_through_after_a_tar_reader_lets_the_writer_finish_its_padding():
    proc = subprocess.Popen([sys.executable, "-c", TAR_WRITER], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            names = [member.name for member in tar]
        left = stream.read_through(proc.stdout)
    finally:
        proc.stdout.close()
        rc = proc.wait(timeout=60)
    assert names == ["manifest.json"]
    assert left >= 2**20
    assert rc == 0, proc.stderr.read().decode()
