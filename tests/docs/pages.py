"""Shared helpers of the documentation tests: the pages, their links and their headings' anchors."""

from __future__ import annotations

import re
from pathlib import Path

from markdown.extensions.toc import slugify  # the anchors MkDocs gives headings (its toc extension)

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
MKDOCS = ROOT / "mkdocs.yml"
README_LIMIT = 12 * 1024

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def prose(text: str) -> str:
    """Markdown without fenced code blocks and code spans (they hold examples, not links)."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def code(text: str) -> str:
    """The fenced code blocks and code spans of Markdown text, one after the other."""
    blocks = [m.group(0) for m in _FENCE.finditer(text)]
    return "\n".join(blocks + _CODE_SPAN.findall(_FENCE.sub("", text)))


def links(text: str) -> list[str]:
    """The targets of the Markdown links in `text`, outside code."""
    return _LINK.findall(prose(text))


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings as MkDocs makes them (code spans keep their text)."""
    text = _FENCE.sub("", path.read_text())
    return {slugify(heading.replace("`", ""), "-") for heading in _HEADING.findall(text)}


def resolve(source: Path, link: str) -> tuple[Path, str] | None:
    """(file, anchor) of a relative link from `source`; None for a web or mail link."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link):
        return None
    target, _, anchor = link.partition("#")
    path = source if not target else (source.parent / target).resolve()
    return path, anchor
