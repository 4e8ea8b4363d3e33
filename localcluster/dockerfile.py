"""What a Dockerfile reads from its build context (pure): ARG expansion, the COPY/ADD sources and
context bind mounts, and the content hash the image builds are keyed by (imagebuild.py)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path


def dockerfile_args(text: str) -> dict[str, str]:
    """ARG defaults of a Dockerfile (every stage), for expanding COPY sources."""
    args: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"\s*ARG\s+(\w+)(?:=(.*))?$", line)
        if m:
            args[m.group(1)] = (m.group(2) or "").strip().strip('"')
    return args


def expand_args(text: str, args: Mapping[str, str]) -> str:
    """Shell-style `$X`, `${X}`, `${X:-default}` and `${X:+alt}` with the ARG defaults."""
    def sub(m: re.Match[str]) -> str:
        name, op, word = m.group(1) or m.group(4), m.group(2), m.group(3)
        value = args.get(name, "")
        if op == ":-":
            return value or word
        if op == ":+":
            return word if value else ""
        return value
    return re.sub(r"\$\{(\w+)(?:(:[-+])([^}]*))?\}|\$(\w+)", sub, text)


def copy_sources(text: str, build_args: Mapping[str, str]) -> list[str]:
    """Context paths a Dockerfile reads: COPY/ADD sources (not `--from` a stage) and RUN bind
    mounts of the context (`--mount=type=bind,source=...` without `from=`), args expanded."""
    args = {**dockerfile_args(text), **build_args}
    out: list[str] = []
    for line in re.sub(r"\\\n", " ", text).splitlines():
        words = line.split()
        if words and words[0].upper() == "RUN":
            for flag in words[1:]:
                if not flag.startswith("--mount="):
                    break
                opts = dict(o.partition("=")[::2] for o in flag[len("--mount="):].split(","))
                if opts.get("type") == "bind" and "from" not in opts:
                    out.append(expand_args(opts.get("source", "."), args))
            continue
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        rest = [w for w in words[1:]]
        if any(w.startswith("--from") for w in rest):
            continue
        paths = [w for w in rest if not w.startswith("--")]
        out += [expand_args(p, args) for p in paths[:-1]]
    return out


def context_files(context: Path, sources: list[str]) -> Iterator[Path]:
    for src in sources:
        for match in sorted(context.glob(src.strip("/"))):
            files = [match] if match.is_file() else sorted(p for p in match.rglob("*") if p.is_file())
            for f in files:
                rel = f.relative_to(context).as_posix()
                if "__pycache__" in rel.split("/") or rel.endswith(".pyc") or ".egg-info/" in rel:
                    continue
                yield f


def content_hash(dockerfile: Path, context: Path, build_args: Mapping[str, str], base_id: str,
                 ignore_file: Path | None = None) -> str:
    """What an image is made of: Dockerfile, ignore file, build args, base image id and every
    copied file (path and bytes). Equal hashes mean the build would produce the same image."""
    text = dockerfile.read_text()
    h = hashlib.sha256()
    h.update(text.encode())
    h.update((ignore_file.read_bytes() if ignore_file and ignore_file.exists() else b""))
    h.update(json.dumps(sorted(build_args.items())).encode())
    h.update(base_id.encode())
    for f in context_files(context, copy_sources(text, build_args)):
        h.update(f.relative_to(context).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()
