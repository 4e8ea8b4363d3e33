"""The real node's image store, filled during the set-up instead of on the first test's clock.

containerd keeps the real node's images in `$CAUSALFLOW_CACHE/containerd-root` across clusters,
so an image is imported once. The first import of a server image (6 GB: PyPI's torch carries the
CUDA libraries) is minutes of disk writes; left to the node, it falls on the critical path of the
first test or of `make demo`. `preload` does it in the set-up, beside the Go builds (they are
CPU-bound, an import is mostly I/O): it starts a containerd of its own on that root with only the
image services (the CRI plugins off: no network, no streaming server, no sandboxes), imports what
is missing, removes older tags of the same repositories, and stops it, leaving no process, mount
or socket behind.

One containerd at a time may use the root, so `preload` holds the machine's real-node slot
(`realnode.owner`) while it runs; when a running cluster holds the slot it does nothing, and that
cluster's node imports on demand as before.

    python -m localcluster.imagebuild --build-only --preload server,operator
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from localcluster import machine
from localcluster.nodeconfig import NO_NRI_NO_TRACING, containerd_core_config
from localcluster.realnode import RealNode, RealNodeInUse, owner_file

if TYPE_CHECKING:
    from localcluster.imagebuild import Images

Log = Callable[[str], None]
# The CRI side of containerd (and what it would start or listen on) is not needed to import.
DISABLED_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images", "io.containerd.cri.v1.runtime",
                    "io.containerd.podsandbox.controller.v1.podsandbox", *NO_NRI_NO_TRACING)
# build-node-binaries.sh stamps this once containerd and ctr are built (before kubelet's long compile).
READY_STAMP = ".containerd-built"


def store_config(work: Path, root: Path) -> str:
    """containerd's config: the node's persistent root, everything volatile in `work`."""
    return containerd_core_config(root, work / "state", work / "tmp", work, DISABLED_PLUGINS, level="warn")


def wait_for_containerd(bin_dir: Path, log: Log, timeout: float = 3600) -> bool:
    """Whether containerd and ctr are built, waiting while the node binaries' build (which holds
    its lock) is still running beside this step."""
    start = time.monotonic()
    said = False
    while time.monotonic() - start < timeout:
        if (bin_dir / READY_STAMP).exists() or (bin_dir.parent / ".complete").exists():
            return True
        bin_dir.parent.mkdir(parents=True, exist_ok=True)
        with (bin_dir.parent / ".lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                building = False
            except BlockingIOError:
                building = True
        if not building and time.monotonic() - start > 60:
            return False  # nobody builds them (after a minute's grace for a build about to start)
        if not said:
            log("images: waiting for the node binaries' build (containerd) to preload the images")
            said = True
        time.sleep(5)
    return False


def preload(images: Images, kinds: list[str], bin_dir: Path, log: Log = print) -> list[str]:
    """Import the images of `kinds` (server, server_tiny, operator) that the node's store lacks.
    Returns the refs imported; does nothing (with a line saying why) when it cannot run here."""
    refs = [ref for ref in (getattr(images, kind) for kind in kinds) if ref]
    if os.geteuid() != 0:
        log("images: not preloaded (containerd needs root); the real node imports them when needed")
        return []
    if not wait_for_containerd(bin_dir, log):
        log(f"images: not preloaded: no containerd in {bin_dir}; the real node imports them when needed")
        return []
    # The node's own ctr, import and slot, on a work dir of its own (short: unix socket paths are at
    # most 107 bytes); claim() also cleans up after a dead earlier holder of the slot.
    work = Path(tempfile.mkdtemp(prefix="cfo-store-"))
    node = RealNode(work, bin_dir)
    try:
        node.claim()
    except RealNodeInUse as exc:
        shutil.rmtree(work, ignore_errors=True)
        log(f"images: not preloaded: {exc}; it imports them when needed")
        return []
    node.dir.mkdir(parents=True)
    node.containerd_root.mkdir(parents=True, exist_ok=True)
    (node.dir / "containerd.toml").write_text(store_config(node.dir, node.containerd_root))
    proc = subprocess.Popen([str(bin_dir / "containerd"), "--config", str(node.dir / "containerd.toml")],
                            stdout=(node.dir / "containerd.log").open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    imported = []
    try:
        deadline = time.monotonic() + 60
        while node.ctr("version", check=False).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd for the preload did not start:\n{(node.dir / 'containerd.log').read_text()[-2000:]}")
            time.sleep(0.2)
        for ref in refs:
            if node.has_image(ref):
                continue
            t0 = time.monotonic()
            images.import_into(node, ref)
            imported.append(ref)
            log(f"images: preloaded {ref} into the real node's image store in {time.monotonic() - t0:.0f}s")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        # nothing else uses the root while the slot is ours
        machine.undo_mounts([str(work), str(node.containerd_root)])
        shutil.rmtree(work, ignore_errors=True)
        owner = owner_file()
        if owner.exists() and json.loads(owner.read_text()).get("workdir") == str(work):
            owner.unlink()
    return imported
