"""buildah as the image builds run it: its tools from Debian's packages, and storage, run root and
TMPDIR of the harness's own under the cache, keyed by buildah's version (no daemon, no registry)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from localcluster import machine
from localcluster.versions import cache_root

Log = Callable[[str], None]


class ImageBuildError(RuntimeError):
    """A base image, build or export failed; the message names the step and shows its log tail."""


def buildah_version() -> str:
    out = subprocess.run(["buildah", "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"version\s+(\S+)", out)
    return m.group(1) if m else "unknown"


def state_dir() -> Path:
    """Buildah storage, pip cache, archives and logs, keyed by buildah's version."""
    version = buildah_version() if shutil.which("buildah") else "missing"
    return cache_root() / "images" / f"buildah-{version}"


TOOLS = ("buildah", "mmdebstrap", "runc", "skopeo")

# Free disk a build of the server image's dependency layers needs at its peak, measured: pip's
# install in the working container, then buildah's commit writing the layer's diff and the new
# layer beside it, for the CUDA libraries' layer (3 GB) and then the rest (3.5 GB, torch among it)
# on top of it. From 26.8 GB free it fell to 10.0 GB (as one 6.5 GB layer: from 27 to 4 GB, and
# with 20 GB free it ran out).
DEPENDENCY_LAYER_PEAK_GB = 17


def explain_build_failure(message: str, free_bytes: int, image: str = "server") -> str:
    """A failed build's message, led by what to do when the disk ran out ("no space left on
    device" somewhere in buildah's log tail, where it is easy to miss). The measured need is the
    server images' (their torch and CUDA layers); another image's is only said to be more."""
    if "no space left on device" not in message:
        return message
    need = (f"building the server image's dependency layers needs about {DEPENDENCY_LAYER_PEAK_GB} GB free "
            f"while it runs" if image.startswith("server") else f"building the {image} image needs more")
    return (f"the disk holding buildah's storage ran out of space during the build ({free_bytes / 1e9:.1f} GB "
            f"free now): {need}; free some and run again (a killed build's leftovers are removed then).\n{message}")


def ensure_tools(log: Log = print) -> None:
    """buildah, mmdebstrap, runc and skopeo (`Images.import_into`) from Debian's packages;
    installed when missing (a fresh CI machine). runc, because Debian's buildah pulls in crun when runc is not there yet, and crun
    refuses this machine's hybrid cgroup v1 layout ("cgroups in hybrid mode not supported"):
    `Buildah.run_image` names runc explicitly."""
    missing = [t for t in TOOLS if not shutil.which(t)]
    if not missing:
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ImageBuildError(f"{', '.join(missing)} missing and cannot be installed here (needs root and apt-get): "
                              f"apt-get install -y {' '.join(TOOLS)}")
    log(f"images: installing {' '.join(missing)} from Debian's packages")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]  # the set-up's other steps may hold apt's lock
    for cmd in ([*apt, "update", "-q"], [*apt, "install", "-y", "-q", *TOOLS]):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode:
            raise ImageBuildError(f"{' '.join(cmd)} failed:\n{(r.stdout + r.stderr)[-3000:]}")


class Buildah:
    """buildah with this harness's own storage (overlay), run root and TMPDIR."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.logs = state / "logs"
        self.tmp = state / "tmp"  # TMPDIR: buildah keeps RUN cache mounts (pip's cache) here
        for d in (self.logs, self.tmp, state / "storage", state / "run", state / "archives"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, "TMPDIR": str(self.tmp), "BUILDAH_LAYERS": "true"}

    @property
    def storage_ref(self) -> str:
        """skopeo's containers-storage reference prefix for this storage (append an image ref)."""
        return f"containers-storage:[overlay@{self.state / 'storage'}+{self.state / 'run'}]"

    def release_stale_mounts(self) -> list[str]:
        """Unmount what a killed buildah left under its storage, deepest first; the mount points.

        The overlay driver bind-mounts its home (storage/overlay) onto itself and undoes that only
        at a clean shutdown: a buildah killed mid-build leaves the mount on the machine. Call with
        the build lock held and after `rm --all` (no build and no working container uses it then)."""
        home = str(self.state / "storage" / "overlay")
        left = sorted((m for m in machine.mount_points() if m == home or m.startswith(home + "/")), reverse=True)
        for point in left:
            subprocess.run(["umount", point], capture_output=True, check=False)
        return left

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.state / "storage"), "--runroot", str(self.state / "run"),
                "--storage-driver", "overlay", *args]

    def run(self, *args: str, log_name: str | None = None, cwd: Path | None = None) -> str:
        """Run buildah; output goes to logs/<log_name>.log when named; failure shows the tail."""
        argv = self.argv(*args)
        if log_name:
            path = self.logs / f"{log_name}.log"
            with path.open("w") as out:
                out.write("$ " + " ".join(argv) + "\n")
                out.flush()
                r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, cwd=cwd)
            if r.returncode:
                tail = path.read_text()[-4000:]
                raise ImageBuildError(f"buildah {args[0]} ({log_name}) failed, rc={r.returncode}; log {path}:\n{tail}")
            return ""
        r = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=cwd)
        if r.returncode:
            raise ImageBuildError(f"{' '.join(argv)} failed, rc={r.returncode}:\n{r.stderr[-3000:]}")
        return r.stdout

    def image_id(self, ref: str) -> str | None:
        r = subprocess.run(self.argv("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref),
                           capture_output=True, text=True, env=self.env)
        return r.stdout.strip() or None if r.returncode == 0 else None

    def inspect(self, ref: str) -> dict:
        return json.loads(self.run("inspect", "--type", "image", ref))

    def config(self, ref: str) -> dict:
        """The image's OCI config (User, Entrypoint, Cmd, Env, ExposedPorts, ...)."""
        return self.inspect(ref)["OCIv1"]["config"]

    def run_image(self, ref: str, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run `command` in a throwaway container of `ref` as the image's own user, under runc
        with no network (its own loopback only); the container is removed afterwards."""
        ctr = self.run("from", "--pull-never", ref).strip()
        try:
            runtime = shutil.which("runc") or "runc"
            return subprocess.run(self.argv("run", "--isolation", "oci", "--runtime", runtime, "--network", "none",
                                            ctr, "--", *command),
                                  capture_output=True, text=True, env=self.env, timeout=timeout)
        finally:
            subprocess.run(self.argv("rm", ctr), capture_output=True, env=self.env)

    def size(self, ref: str) -> str:
        """The image's uncompressed size as `buildah images` shows it (decimal units, e.g. "274 MB")."""
        images = json.loads(self.run("images", "--json", ref) or "[]")
        return str(images[0].get("size", "?")) if images else "?"
