"""An image into the real node's containerd, sending only the layers the node does not hold yet.

A docker-archive of a server image is 6 GB (PyPI's torch carries the CUDA libraries), and
containerd's import reads and hashes every byte of it even when only the server's code layer
changed: about two minutes per import on this machine, after every server change, and twice (the
server and the server-tiny images share every layer but the model's). containerd's import of an
OCI layout, unlike that of a docker-archive, finds a manifest's layers by digest in its content
store, so the archive may leave out what the node already has.

skopeo (Debian's package) copies the image from buildah's storage into an OCI layout directory
with its layers uncompressed (`--dest-oci-accept-uncompressed-layers`; buildah 1.28's own push to
an OCI layout gzips them), so their digests stay the diff ids the node keys them by. The layers the
node holds are laid down first as sparse files of their size: skopeo's OCI destination takes a
blob that exists at its path as already there, and neither reads nor writes it. The tar sent to
`ctr images import` then carries the manifest, the config and the new layers, and names the
image with containerd's `io.containerd.image.name` annotation.

    with thin_archive(storage_ref, ref, layers, have, work_dir) as pipe:
        node.import_image(pipe, ref)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import threading
import time
from pathlib import Path
from typing import IO, Collection, Iterator, Mapping

# containerd's annotation for the name an imported manifest gets (images.AnnotationImageName).
IMAGE_NAME_ANNOTATION = "io.containerd.image.name"


def read_through(pipe: IO[bytes]) -> int:
    """Read what a reader left on `pipe` and return how many bytes that was.

    A tar reader (Python's `tarfile`, Go's `archive/tar` in `ctr images import`) stops at the two
    zero blocks that end an archive; the writer then still has the record padding to write (up to
    10 KiB, more for some writers), and with the reader gone that write fails with a broken pipe,
    or not, as the pipe buffer and the scheduler decide. Reading it out makes a writer's exit
    status mean what it says about the archive."""
    total = 0
    while chunk := pipe.read(1 << 16):
        total += len(chunk)
    return total


class ThinImportError(RuntimeError):
    """The OCI layout could not be written or sent; the caller falls back to the whole image."""


# --- pure ---------------------------------------------------------------------------------------

def manifest_layers(manifest: Mapping) -> dict[str, int]:
    """digest -> size of an image manifest's layers (docker v2s2 or OCI: the same fields)."""
    return {layer["digest"]: int(layer["size"]) for layer in manifest.get("layers") or ()}


def held_layers(layers: Mapping[str, int], have: Collection[str]) -> dict[str, int]:
    """The layers (digest -> size) that a store holding the digests `have` already has."""
    return {digest: size for digest, size in layers.items() if digest in have}


def worth_thin(layers: Mapping[str, int], have: Collection[str]) -> bool:
    """Whether to send only the new layers: when the store holds at least half of the image's bytes.
    Otherwise the new layers are most of the image, and writing them into a layout directory first
    costs more than the docker-archive stream, which writes nothing to disk."""
    total = sum(layers.values())
    return total > 0 and 2 * sum(held_layers(layers, have).values()) >= total


def named_index(index: Mapping, ref: str) -> dict:
    """The layout's index.json with every manifest named `ref` for containerd's import."""
    out = json.loads(json.dumps(index))
    for manifest in out.get("manifests") or ():
        manifest.setdefault("annotations", {})[IMAGE_NAME_ANNOTATION] = ref
    return out


def blob_name(digest: str) -> str:
    """`sha256:abc` -> `blobs/sha256/abc`, the blob's path inside an OCI layout."""
    algorithm, _, hex_digest = digest.partition(":")
    if not algorithm or not hex_digest or "/" in digest or ".." in digest:
        raise ValueError(f"not a digest: {digest!r}")
    return f"blobs/{algorithm}/{hex_digest}"


# --- I/O ----------------------------------------------------------------------------------------

def write_layout(storage_ref: str, ref: str, placeholders: Mapping[str, int], layout: Path,
                 env: Mapping[str, str], timeout: float = 1800) -> None:
    """`ref` from buildah's storage (`storage_ref`, skopeo's containers-storage reference prefix)
    into the OCI layout `layout`, skipping the blobs in `placeholders` (digest -> size)."""
    for digest, size in placeholders.items():
        path = layout / blob_name(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as f:
            f.truncate(size)  # sparse: no bytes on disk
    argv = ["skopeo", "copy", "--quiet", "--dest-oci-accept-uncompressed-layers",
            f"{storage_ref}{ref}", f"oci:{layout}:{ref}"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise ThinImportError(f"{' '.join(argv)} took over {timeout:.0f}s") from exc
    except OSError as exc:  # no skopeo
        raise ThinImportError(f"{' '.join(argv)}: {exc}") from exc
    if r.returncode:
        raise ThinImportError(f"{' '.join(argv)} failed, rc={r.returncode}:\n{(r.stdout + r.stderr)[-3000:]}")


def _write_tar(out: IO[bytes], layout: Path, ref: str, skip: Collection[str]) -> int:
    """The layout as a tar on `out`, without the blobs in `skip`; returns the blob bytes sent."""
    sent = 0
    index = named_index(json.loads((layout / "index.json").read_text()), ref)
    with tarfile.open(fileobj=out, mode="w|") as tar:
        tar.add(layout / "oci-layout", arcname="oci-layout")
        data = json.dumps(index).encode()
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        skipped = {blob_name(d) for d in skip}
        for path in sorted((layout / "blobs").rglob("*")):
            name = path.relative_to(layout).as_posix()
            if path.is_file() and name not in skipped:
                tar.add(path, arcname=name)
                sent += path.stat().st_size
    return sent


@contextlib.contextmanager
def thin_archive(storage_ref: str, ref: str, layers: Mapping[str, int], have: Collection[str], work: Path,
                 env: Mapping[str, str] | None = None, log=print) -> Iterator[IO[bytes]]:
    """An OCI archive of `ref` on a pipe, without the layers whose digests are in `have`.

    The layout is written into a fresh directory under `work` (on the same disk as buildah's
    storage) and removed afterwards; a writer thread streams it, so a reader that stops early
    (a failed import) ends it with a broken pipe rather than leaving it blocked."""
    held = held_layers(layers, have)
    work.mkdir(parents=True, exist_ok=True)
    layout = Path(os.path.realpath(work)) / f"oci-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(layout, ignore_errors=True)
    t0 = time.monotonic()
    try:
        write_layout(storage_ref, ref, held, layout, env or os.environ)
        read_fd, write_fd = os.pipe()
        result: dict[str, object] = {}

        def writer() -> None:
            try:
                with os.fdopen(write_fd, "wb") as out:
                    result["sent"] = _write_tar(out, layout, ref, held)
            except BaseException as exc:  # reported to the caller below
                result["error"] = exc

        thread = threading.Thread(target=writer, name=f"oci-archive {ref}", daemon=True)
        thread.start()
        with os.fdopen(read_fd, "rb") as pipe:
            try:
                yield pipe
                read_through(pipe)  # the archive's end padding, which a tar reader leaves
            finally:
                pipe.close()  # a reader that failed unblocks the writer (EPIPE)
                thread.join()
        if "error" in result:
            raise ThinImportError(f"writing the OCI archive of {ref} failed: {result['error']!r}")
        total = sum(layers.values())
        log(f"images: streamed {ref} as an OCI archive of its new layers: {int(result['sent']) / 2**20:.0f} MiB "
            f"sent, {sum(held.values()) / 2**20:.0f} of {total / 2**20:.0f} MiB of layers already in the store, "
            f"in {time.monotonic() - t0:.1f}s")
    finally:
        shutil.rmtree(layout, ignore_errors=True)
