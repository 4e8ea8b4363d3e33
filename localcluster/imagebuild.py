"""Both product images, built from their real Dockerfiles without a daemon, for the real node.

No image registry is reachable here, so `FROM ${BASE_IMAGE}` gets a local Debian bookworm image
made with mmdebstrap from Debian's packages, standing in for the production base:

- `Dockerfile.server`'s base (production: nvidia/cuda ...-base-ubuntu24.04) is a minimal
  Debian with apt and ca-certificates and no python: the Dockerfile installs python itself.
- `Dockerfile.operator`'s base (production: python:3.12.8-slim-bookworm) is a minimal Debian with
  python3 (3.11, bookworm's) and the venv module, reachable as /usr/local/bin/python like in the
  python image, with the same PATH and LANG.

Every step after FROM runs as in production. buildah (Debian package) builds with `--layers`,
`--format docker` (keeps HEALTHCHECK), `--network host` (no bridge, no firewall chains on this
machine) and `--isolation chroot`; the machine's CA bundle is mounted read-only over the image's
bundle for RUN steps only, since outbound TLS here goes through an intercepting proxy. The
Dockerfiles install dependencies from pyproject.toml before copying the source, so after a code
change the layer cache keeps the torch layer and only the last layers rebuild. Their pip cache
mount lives in TMPDIR (inside the state directory below); on this machine pip stores nothing in
it, because the proxy drops the Cache-Control headers pip's HTTP cache needs.
The server image installs server/requirements.lock, PyPI's Linux torch among it (which carries the
CUDA libraries, hence a ~6 GB server image; the server runs on the CPU with DEVICE=auto).

Images are tagged by content (Dockerfile, ignore file, build arguments, base image id and every
file the Dockerfile copies), so a changed source gives a new tag and an unchanged one is not
rebuilt. `Images.import_into(node, ref)` sends the node only the layers it lacks when it holds
most of the image (`imagestream`: after a code change, the code layer, not 6 GB); otherwise
`Images.stream(ref)` pipes the whole image as a docker-archive (`buildah push` to stdout) into
`ctr -n k8s.io images import -`, so an import writes no 6 GB file. `Images.archive(ref)` writes
that archive as a file instead (for a person importing elsewhere), again only when the image id
changed. State lives in
`$CAUSALFLOW_CACHE/images/buildah-<version>/` (default ~/.cache/causalflow-ocr), so re-runs are warm.

    images = ensure_images()
    images.server_tiny                 # localhost/causalflow-ocr-server-tiny:<hash>
    images.import_into(cluster, images.operator)  # the layers the node lacks, or all of it
    with images.stream(images.operator) as pipe:   # its whole docker-archive, on a pipe
        cluster.import_image(pipe, images.operator)
    images.archive(images.operator)    # or as a file: Path of its docker-archive

`python -m localcluster.imagebuild [--json]` builds and exports them and prints refs, sizes and timings.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Iterator, Mapping, Protocol

from localcluster import imagestream
from localcluster.buildah import Buildah, ImageBuildError, Log, ensure_tools, explain_build_failure, state_dir
from localcluster.dockerfile import content_hash

REPO = Path(__file__).resolve().parents[1]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
TINY_MODEL_PREFIX = "models/tiny-random-deepseek-ocr2-"  # + generator hash; in the build context, gitignored
BUNDLE_IN_IMAGE = "/etc/ssl/certs/ca-certificates.crt"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Bump when a base recipe below changes: it is part of the base images' tags.
BASE_RECIPE_VERSION = "1"
# `buildah bud` flags that shape the image; part of every image's content tag.
# docker format: OCI image configs have no HEALTHCHECK, and production builds keep it.
BUD_FLAGS = ("--layers", "--format", "docker", "--network", "host", "--isolation", "chroot")



@dataclass(frozen=True)
class Images:
    """Refs of the images the real node runs (None: not built, see `ensure_images(kinds=...)`),
    and where their archives are."""

    server: str | None
    server_tiny: str | None
    operator: str | None
    archive_dir: Path = field(default_factory=lambda: state_dir() / "archives")
    log: Log = field(default=print, compare=False, repr=False)

    def archive(self, ref: str) -> Path:
        """The docker-archive of `ref` (one of this object's refs), for `ctr images import`.

        Exported on first use (a server archive is 6 GB and a minute or two to write, so only the
        images a caller imports are written) and again only when the image id changed."""
        self._check(ref)
        path = self.archive_dir / archive_name(ref)
        state = self.archive_dir.parent
        with _locked(state):
            return export_archive(Buildah(state), ref, path, self.log, {})

    def _check(self, ref: str) -> None:
        if ref not in self.refs:
            raise ValueError(f"{ref!r} is not one of these images: {', '.join(self.refs)}")

    @contextlib.contextmanager
    def stream(self, ref: str) -> Iterator[IO[bytes]]:
        """`ref` as a docker-archive on a pipe (`buildah push` to its stdout), for `ctr images
        import -`: nothing is written to disk, where an archive of a server image takes 6 GB and
        its write and read again are part of every first import."""
        self._check(ref)
        state = self.archive_dir.parent
        with _locked(state):
            b = Buildah(state)
            t0 = time.monotonic()
            err = b.logs / f"push-{archive_name(ref)}.log"
            with err.open("wb") as log_file:
                proc = subprocess.Popen(b.argv("push", ref, f"docker-archive:/dev/stdout:{ref}"), env=b.env,
                                        stdout=subprocess.PIPE, stderr=log_file)
                try:
                    yield proc.stdout
                    imagestream.read_through(proc.stdout)  # the end padding a tar reader leaves
                finally:
                    proc.stdout.close()  # a reader that failed must not leave buildah blocked
                    rc = proc.wait()
            if rc:
                raise ImageBuildError(f"buildah push {ref} to a pipe failed, rc={rc}; log {err}:\n{err.read_text()[-3000:]}")
            self.log(f"images: streamed {ref} in {time.monotonic() - t0:.1f}s")

    def import_into(self, target: ImageTarget, ref: str) -> None:
        """Import `ref` into `target` (the real node, or a cluster with one), sending only the
        layers its store lacks when it holds most of the image's bytes (`imagestream`): after a
        server change that is the code layer, where the whole image is 6 GB to stream and hash.
        Otherwise, or if that fails, the whole image as a docker-archive (`stream`)."""
        self._check(ref)
        state = self.archive_dir.parent
        have = target.content_digests()
        with _locked(state):
            b = Buildah(state)
            layers = imagestream.manifest_layers(json.loads(b.inspect(ref)["Manifest"]))
        if imagestream.worth_thin(layers, have):
            try:
                with _locked(state), imagestream.thin_archive(b.storage_ref, ref, layers, have, b.tmp,
                                                              env=b.env, log=self.log) as pipe:
                    target.import_image(pipe, ref)
                return
            except RuntimeError as exc:  # imagestream.ThinImportError, or ctr's RealNodeError
                self.log(f"images: importing only the new layers of {ref} failed, streaming the whole image: {exc}")
        with self.stream(ref) as pipe:
            target.import_image(pipe, ref)

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(ref for ref in (self.server, self.server_tiny, self.operator) if ref)


class ImageTarget(Protocol):
    """Where `Images.import_into` imports: `RealNode`, or `LocalCluster` with a real node."""

    def content_digests(self) -> set[str]: ...

    def import_image(self, archive: IO[bytes], ref: str | None = None) -> None: ...


@dataclass(frozen=True)
class BaseRecipe:
    """A local base image: Debian packages plus the image config the production base has."""

    name: str
    packages: tuple[str, ...]
    links: tuple[tuple[str, str], ...] = ()  # (link, target) inside the image
    env: tuple[tuple[str, str], ...] = (("PATH", PATH_ENV),)
    cmd: str = "bash"

    def tag(self) -> str:
        key = json.dumps([BASE_RECIPE_VERSION, SUITE, MIRROR, self.packages, self.links, self.env, self.cmd])
        return f"localhost/causalflow-ocr-base-{self.name}:{SUITE}-{_sha(key.encode())[:12]}"


# Like the CUDA base: apt, ca-certificates, no python (Dockerfile.server installs it).
SERVER_BASE = BaseRecipe("apt", ("ca-certificates",))
# Like python:*-slim-bookworm: python on PATH at /usr/local/bin, venv module, UTF-8 locale.
OPERATOR_BASE = BaseRecipe(
    "python",
    ("ca-certificates", "python3", "python3-venv"),
    links=(("/usr/local/bin/python", "/usr/bin/python3"), ("/usr/local/bin/python3", "/usr/bin/python3")),
    env=(("PATH", PATH_ENV), ("LANG", "C.UTF-8")),
    cmd="python3",
)


# --- pure helpers -------------------------------------------------------------------------------

def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def archive_name(ref: str) -> str:
    """`localhost/causalflow-ocr-server:abc` -> `causalflow-ocr-server_abc.tar`."""
    repo, _, tag = ref.rpartition(":")
    return f"{repo.rsplit('/', 1)[-1]}_{tag}.tar"


def ca_bundle(env: Mapping[str, str] = os.environ) -> Path:
    """The CA bundle this machine's own pip trusts (PIP_CERT, SSL_CERT_FILE, ..., else the system's)."""
    for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
        if env.get(key) and Path(env[key]).is_file():
            return Path(env[key])
    return Path("/etc/ssl/certs/ca-certificates.crt")


def ensure_base(b: Buildah, recipe: BaseRecipe, log: Log) -> str:
    """The local base image for `recipe`, built with mmdebstrap when it is not there yet."""
    ref = recipe.tag()
    if b.image_id(ref):
        return ref
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(dir=b.tmp) as tmp:
        tar = Path(tmp) / "rootfs.tar"
        hooks = [f'--customize-hook=ln -sf {target} "$1{link}"' for link, target in recipe.links]
        argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(recipe.packages)}",
                "--aptopt=Acquire::Retries \"3\"", *hooks, SUITE, str(tar), MIRROR]
        path = b.logs / f"base-{recipe.name}.log"
        with path.open("w") as out:
            r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT)
        if r.returncode:
            raise ImageBuildError(f"mmdebstrap failed, rc={r.returncode}; log {path}:\n{path.read_text()[-4000:]}")
        ctr = b.run("from", "scratch").strip()
        try:
            b.run("add", ctr, str(tar), "/")
            config = [a for k, v in recipe.env for a in ("--env", f"{k}={v}")]
            b.run("config", *config, "--cmd", recipe.cmd, "--label", f"org.causalflow.base-recipe={recipe.name}", ctr)
            b.run("commit", "--rm", ctr, ref)
        except BaseException:
            subprocess.run(b.argv("rm", ctr), capture_output=True, env=b.env)
            raise
    log(f"images: base {ref} built in {time.monotonic() - t0:.1f}s (mmdebstrap {SUITE} minbase + {', '.join(recipe.packages)})")
    return ref


def ensure_tiny_model(log: Log) -> str:
    """The tiny random model inside the build context, as the BAKE_MODEL_FROM path: a copy of the
    suite's cached one (`ocr_server_testing.tiny_cache`, the native layout, seed 0: written once per
    version of its generator, across checkouts). Its folder is named by that version, so a new
    generator gives a new build argument and no cached layer holds the old weights (a RUN's bind
    mount is not part of buildah's layer cache key, its build arguments are)."""
    from ocr_server_testing import tiny_cache

    rel = TINY_MODEL_PREFIX + tiny_cache.generator_hash()[:12]
    out = REPO / rel
    if (out / ".complete").exists():
        return rel
    t0 = time.monotonic()
    for old in (REPO / "models").glob(Path(TINY_MODEL_PREFIX).name + "*"):
        shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(tiny_cache.cached(), out)
    (out / ".complete").write_text("")
    log(f"images: tiny model copied to {out} in {time.monotonic() - t0:.1f}s")
    return rel


@dataclass(frozen=True)
class Build:
    """One image: which Dockerfile, which repository, which build arguments, on which base."""

    name: str
    dockerfile: str
    repository: str
    base: BaseRecipe
    build_args: tuple[tuple[str, str], ...] = ()


BUILDS = (
    Build("server", "Dockerfile.server", "localhost/causalflow-ocr-server", SERVER_BASE),
    # + BAKE_MODEL_FROM=<the tiny model's folder>, known once it is written (ensure_tiny_model); the
    # test image also carries the server's test helpers (the fault plugin SERVER_PLUGINS names)
    Build("server_tiny", "Dockerfile.server", "localhost/causalflow-ocr-server-tiny", SERVER_BASE,
          (("TEST_HELPERS_FROM", "server_testing"),)),
    Build("operator", "Dockerfile.operator", "localhost/causalflow-ocr-operator", OPERATOR_BASE),
)


def ignore_file_for(dockerfile: str) -> Path:
    """BuildKit's rule: `<Dockerfile>.dockerignore` when it exists, else the context's .dockerignore."""
    specific = REPO / f"{dockerfile}.dockerignore"
    return specific if specific.exists() else REPO / ".dockerignore"


def build_image(b: Buildah, spec: Build, log: Log, timings: dict[str, float]) -> str:
    """Build `spec` unless an image with the same content tag exists; return its ref."""
    base_ref = ensure_base(b, spec.base, log)
    base_id = b.image_id(base_ref) or ""
    args = {"BASE_IMAGE": base_ref, **dict(spec.build_args)}
    ignore = ignore_file_for(spec.dockerfile)
    digest = content_hash(REPO / spec.dockerfile, REPO, args, base_id + " ".join(BUD_FLAGS), ignore)
    ref = f"{spec.repository}:{digest[:16]}"
    if b.image_id(ref):
        return ref
    bundle = ca_bundle()
    argv = ["bud", *BUD_FLAGS, "-f", spec.dockerfile, "--ignorefile", str(ignore), "-t", ref,
            "-v", f"{bundle}:{BUNDLE_IN_IMAGE}:ro"]
    for k, v in args.items():
        argv += ["--build-arg", f"{k}={v}"]
    log(f"images: building {ref} from {spec.dockerfile} (log {b.logs / (spec.name + '.log')})")
    t0 = time.monotonic()
    try:
        b.run(*argv, ".", log_name=spec.name, cwd=REPO)
    except ImageBuildError as exc:
        raise ImageBuildError(explain_build_failure(str(exc), shutil.disk_usage(b.state).free, spec.name)) from exc
    timings[f"build_{spec.name}_s"] = round(time.monotonic() - t0, 1)
    log(f"images: {ref} built in {timings[f'build_{spec.name}_s']}s")
    return ref


def export_archive(b: Buildah, ref: str, archive: Path, log: Log, timings: dict[str, float]) -> Path:
    """docker-archive of `ref` at `archive`; skipped when the archive holds the same image id."""
    image_id = b.image_id(ref) or ""
    stamp = archive.with_suffix(".id")
    if archive.exists() and stamp.exists() and stamp.read_text() == image_id:
        return archive
    t0 = time.monotonic()
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    b.run("push", ref, f"docker-archive:{partial}:{ref}")
    partial.replace(archive)
    stamp.write_text(image_id)
    timings[f"export_{archive_name(ref)}_s"] = round(time.monotonic() - t0, 1)
    log(f"images: exported {ref} to {archive} ({archive.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - t0:.1f}s")
    return archive


def _prune_archives(archive_dir: Path, keep: set[str], repositories: set[str]) -> None:
    """Old archives of the same repositories go: one per image is enough (they are GBs)."""
    prefixes = tuple(repo.rsplit("/", 1)[-1] + "_" for repo in repositories)
    for f in archive_dir.glob("*.tar"):
        if f.name not in keep and f.name.startswith(prefixes):
            f.unlink(missing_ok=True)
            f.with_suffix(".id").unlink(missing_ok=True)


def _prune_images(b: Buildah, keep: set[str], repositories: set[str]) -> None:
    """Remove older builds of `repositories`, so that storage holds one server image, not one per
    change: buildah's rmi takes with each the intermediate images (the build cache) that only it
    stood on, its dependency layer too when that changed (a new server lock: 6.5 GB freed)."""
    for image in json.loads(b.run("images", "--json") or "[]"):
        for name in image.get("names") or ():
            if name.rpartition(":")[0] in repositories and name not in keep:
                subprocess.run(b.argv("rmi", name), capture_output=True, env=b.env)


@contextlib.contextmanager
def _locked(state: Path) -> Iterator[None]:
    """One builder or exporter at a time per state directory (the harness and a person)."""
    state.mkdir(parents=True, exist_ok=True)
    with (state / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


KINDS = ("server", "server_tiny", "operator")


def ensure_images(log: Log = print, timings: dict[str, float] | None = None, prebuild: bool = False,
                  kinds: tuple[str, ...] = KINDS) -> Images | None:
    """Build what is missing or out of date and return the refs; `Images.archive(ref)` exports.

    Serialised with a lock file, so two callers (the harness and a person) never build at once.
    `prebuild` builds only the images that need no tiny model (the model is written with the
    venv's torch), returns None and prunes nothing: the set-up runs it while the venv installs,
    so the long layers (torch) are cached by the time the venv exists. `kinds` limits the build
    to those images (`make demo` runs the operator as a local process: no operator image); the
    others' refs are None and their stored builds are left alone.
    """
    timings = {} if timings is None else timings
    ensure_tools(log)
    state = state_dir()
    b = Buildah(state)
    with _locked(state):
        # A build that was killed leaves its working container mounted (an overlay mount under the
        # state dir) and the storage's home bind-mounted on itself; nothing else uses this private
        # storage while the lock is held.
        b.run("rm", "--all")
        for point in b.release_stale_mounts():
            log(f"unmounted {point}, left by a build that was killed")
        t0 = time.monotonic()
        refs: dict[str, str | None] = {kind: None for kind in KINDS}
        for spec in BUILDS:
            if spec.name not in kinds:
                continue
            if spec.name == "server_tiny":
                if prebuild:
                    continue
                spec = replace(spec, build_args=spec.build_args + (("BAKE_MODEL_FROM", ensure_tiny_model(log)),))
            refs[spec.name] = build_image(b, spec, log, timings)
        if prebuild:
            return None
        images = Images(archive_dir=state / "archives", log=log, **refs)
        built = {spec.repository for spec in BUILDS if spec.name in kinds}
        _prune_images(b, set(images.refs), built)
        _prune_archives(images.archive_dir, {archive_name(r) for r in images.refs}, built)
        timings["build_total_s"] = round(time.monotonic() - t0, 1)
    return images


def describe(images: Images) -> dict:
    """Refs, ids, sizes and archive sizes, for the CLI and the closing note."""
    b = Buildah(state_dir())
    out = {}
    for name, ref in (("server", images.server), ("server_tiny", images.server_tiny), ("operator", images.operator)):
        if ref is None:
            continue
        archive = images.archive_dir / archive_name(ref)
        out[name] = {
            "ref": ref,
            "id": b.image_id(ref),
            "size": b.size(ref),
            "archive": str(archive),
            "archive_mib": round(archive.stat().st_size / 2**20, 1) if archive.exists() else None,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print refs, sizes and timings as JSON")
    parser.add_argument("--build-only", action="store_true",
                        help="build what is missing and export no archive (the set-up of make test/demo: "
                             "the real node's import streams the image, no archive is written)")
    parser.add_argument("--prebuild", action="store_true",
                        help="build only the images that need no tiny model; runs without the venv (stdlib only)")
    parser.add_argument("--preload", metavar="KINDS", default="",
                        help="comma-separated server, server_tiny, operator: import them into the real node's "
                             "image store now, where it lacks them (waits for the node binaries' containerd)")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="comma-separated images to build (default all: server, server_tiny, operator)")
    args = parser.parse_args(argv)
    kinds = [k for k in args.preload.split(",") if k]
    build = tuple(k for k in args.kinds.split(",") if k)
    for option, names in (("--preload", kinds), ("--kinds", build)):
        if unknown := [k for k in names if k not in KINDS]:
            parser.error(f"{option}: unknown image kind(s) {', '.join(unknown)}; one of {', '.join(KINDS)}")
    timings: dict[str, float] = {}
    try:
        images = ensure_images(log=lambda m: print(m, file=sys.stderr, flush=True), timings=timings,
                               prebuild=args.prebuild, kinds=build)
    except ImageBuildError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 1
    if images is None:
        return 0
    if kinds:
        from localcluster.imagestore import preload
        from localcluster.realnode import node_binaries_dir

        try:
            preload(images, kinds, node_binaries_dir(build=False), log=lambda m: print(m, file=sys.stderr, flush=True))
        except (RuntimeError, ImageBuildError, OSError, subprocess.SubprocessError) as exc:
            print(f"images: preload failed (the real node imports them when needed): {exc}", file=sys.stderr)
    for ref in () if args.build_only else images.refs:
        t0 = time.monotonic()
        images.archive(ref)
        timings[f"archive_{archive_name(ref)}_s"] = round(time.monotonic() - t0, 1)
    info = describe(images)
    if args.json:
        print(json.dumps({"images": info, "timings": timings}, indent=2))
    else:
        for name, item in info.items():
            archive = f"archive {item['archive']} ({item['archive_mib']} MiB)" if item["archive_mib"] else "no archive yet"
            print(f"{name:12} {item['ref']}  {item['size']}  {archive}")
        for var, ref in (("CAUSALFLOW_SERVER_IMAGE", images.server_tiny), ("CAUSALFLOW_OPERATOR_IMAGE", images.operator)):
            if ref:
                print(f"export {var}={ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
