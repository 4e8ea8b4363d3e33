"""The quality gate's golden pages: read from a ConfigMap or from a pod's listing of the model
PVC, bounded, and digested (a recording is for one digest of the pages and the gate's settings).
Pure: gaterun.py fetches the bytes."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ocr_limits.quality import MAX_GOLDEN_BYTES, MAX_GOLDEN_PAGES, MAX_PAGE_TEXT_CHARS

# QualityGate condition reasons (CamelCase, stable).
PAGES_MISSING = "GoldenPagesMissing"
PAGES_INVALID = "GoldenPagesInvalid"
PAGES_TOO_LARGE = "GoldenPagesTooLarge"

# status.qualityGate.phase
RUNNING, RECORDING, WAITING, PASSED, FAILED = "Running", "Recording", "Waiting", "Passed", "Failed"

EXPECTED_SUFFIX = ".txt"
PAGES_FIELD = "spec.rollout.qualityGate.goldenPages.configMapName"
PVC_FIELD = "spec.rollout.qualityGate.goldenPages.pvcPath"


class GatePod(Protocol):
    """What the gate reads of one pod (rollout.PodView has these fields)."""

    name: str
    revision: str | None
    ready: bool
    awaiting_gate: bool  # containers Ready, held back only by the readiness gate
    ip: str | None
    deleting: bool


def first_pod(pods: Iterable[GatePod], revision: str, *, ready: bool) -> GatePod | None:
    """The first pod (by name) of `revision` with an IP that is Ready (`ready`) or awaiting the gate."""
    found = [p for p in pods if p.revision == revision and not p.deleting and p.ip
             and (p.ready if ready else p.awaiting_gate)]
    return min(found, key=lambda p: p.name) if found else None


@dataclass(frozen=True)
class Page:
    """One golden page. From a ConfigMap it carries its bytes; from the model PVC only the
    sha256 the pod listed, and gaterun fetches the bytes from that pod (GoldenPages.source)."""

    name: str
    data: bytes = field(repr=False)
    expected: str | None = None
    sha256: str = ""

    def __post_init__(self) -> None:
        if not self.sha256:
            object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())


@dataclass(frozen=True)
class GoldenPages:
    pages: tuple[Page, ...]
    digest: str  # names the pages' bytes and expected texts: a recording is for one digest
    source: str | None = None  # pages on the PVC: the IP of the pod that listed them, which serves their bytes

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.pages)

    @property
    def need_baseline(self) -> bool:
        """Whether some page has no expected text, so the last good revision's output is compared."""
        return any(p.expected is None for p in self.pages)


@dataclass(frozen=True)
class PagesProblem:
    """Golden pages the gate cannot use: the condition's reason and a message naming the field."""

    reason: str
    message: str


def _count_problem(where: str, count: int) -> PagesProblem | None:
    if count > MAX_GOLDEN_PAGES:
        return PagesProblem(PAGES_TOO_LARGE, f"{where} holds {count} pages, more than {MAX_GOLDEN_PAGES}")
    return None


def _size_problem(where: str, total: int, page: str, expected: str | None, text_place: str) -> PagesProblem | None:
    """The pages so far (`total` bytes, this `page`'s expected text) beyond the bounds?"""
    if total > MAX_GOLDEN_BYTES:
        return PagesProblem(PAGES_TOO_LARGE, f"{where} holds more than {MAX_GOLDEN_BYTES} bytes of pages")
    if expected is not None and len(expected) > MAX_PAGE_TEXT_CHARS:
        return PagesProblem(PAGES_TOO_LARGE, f"{where}: {text_place}{page}{EXPECTED_SUFFIX} is longer than "
                                             f"{MAX_PAGE_TEXT_CHARS} characters")
    return None


def _bounded(where: str, count: int, entries: Iterable[tuple[Page, int] | PagesProblem], text_place: str
             ) -> list[Page] | PagesProblem:
    """The pages of `entries` (each a page and its size in bytes, or what is wrong with it, read one
    by one) within the bounds on count, bytes and expected texts, or the first problem."""
    if problem := _count_problem(where, count):
        return problem
    pages: list[Page] = []
    total = 0
    for entry in entries:
        if isinstance(entry, PagesProblem):
            return entry
        page, size = entry
        total += size
        if problem := _size_problem(where, total, page.name, page.expected, text_place):
            return problem
        pages.append(page)
    return pages


def _configmap_pages(where: str, binary: Mapping[str, Any], data: Any) -> Iterator[tuple[Page, int] | PagesProblem]:
    for key in sorted(binary):
        try:
            raw = base64.b64decode(str(binary[key]), validate=True)
        except (binascii.Error, ValueError):
            yield PagesProblem(PAGES_INVALID, f"{where}: binaryData key {key} is not base64")
            return
        if not raw:
            yield PagesProblem(PAGES_INVALID, f"{where}: binaryData key {key} is empty")
            return
        expected = data.get(key + EXPECTED_SUFFIX) if isinstance(data, Mapping) else None
        yield Page(key, raw, None if expected is None else str(expected)), len(raw)


def read_pages(configmap: Mapping[str, Any] | None, name: str, settings: str = "") -> GoldenPages | PagesProblem:
    """The golden pages of the ConfigMap `name` (as the API returns it: binaryData in base64),
    or what is wrong with them. Bounded: MAX_GOLDEN_PAGES pages, MAX_GOLDEN_BYTES in all, expected
    texts of MAX_PAGE_TEXT_CHARS. `settings` (the gate's request settings) is part of the digest:
    outputs recorded with other settings are no baseline."""
    where = f"{PAGES_FIELD}: ConfigMap {name}"
    if configmap is None:
        return PagesProblem(PAGES_MISSING, f"{where} not found in the OcrService's namespace")
    binary = configmap.get("binaryData") or {}
    data = configmap.get("data") or {}
    if not isinstance(binary, Mapping) or not binary:
        return PagesProblem(PAGES_INVALID, f"{where} has no page: put each page's bytes under a binaryData key")
    pages = _bounded(where, len(binary), _configmap_pages(where, binary, data), "data key ")
    if isinstance(pages, PagesProblem):
        return pages
    strays = sorted(k for k in data if not (k.endswith(EXPECTED_SUFFIX) and k[:-len(EXPECTED_SUFFIX)] in binary))
    if strays:
        return PagesProblem(PAGES_INVALID, f"{where}: data key {strays[0]} names no page (expected texts are "
                                           f"data keys <binaryData key>{EXPECTED_SUFFIX})")
    return GoldenPages(tuple(pages), _digest(settings, pages))


def _digest(settings: str, pages: Iterable[Page]) -> str:
    """The same pages (names, bytes, expected texts) sent with the same settings have the same
    digest, wherever they are kept."""
    return hashlib.sha256(json.dumps(
        [settings] + [[p.name, p.sha256, p.expected] for p in pages]).encode()).hexdigest()[:16]


# What the server answers (ocr_server.serving.golden: error.type) -> the QualityGate condition's reason.
LISTING_REASONS = {"golden_pages_missing": PAGES_MISSING, "golden_pages_too_large": PAGES_TOO_LARGE,
                   "golden_pages_invalid": PAGES_INVALID}
SHA256 = re.compile(r"[0-9a-f]{64}")


def _listed_pages(where: str, listed: list[Any]) -> Iterator[tuple[Page, int] | PagesProblem]:
    for item in listed:
        ok = isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("size"), int) \
            and isinstance(item.get("sha256"), str) and SHA256.fullmatch(item["sha256"]) is not None \
            and (item.get("expected") is None or isinstance(item.get("expected"), str))
        if not ok:
            yield PagesProblem(PAGES_INVALID, f"{where}: the listing is not one of name, size, sha256, expected")
            return
        yield Page(item["name"], b"", item.get("expected"), item["sha256"]), max(0, item["size"])


def read_listing(code: int, body: Any, path: str, pod: str, ip: str, settings: str = ""
                 ) -> GoldenPages | PagesProblem | None:
    """The golden pages a pod listed (GET /v1/golden: HTTP status `code`, JSON `body`) from
    goldenPages.pvcPath `path`, or what is wrong with them; None when the pod could not say (not
    a 4xx: asked again at the next reconcile). The listing is bounded here too, as a ConfigMap is:
    the pages' bytes are fetched later and must match the sha256 listed (gaterun)."""
    where = f"{PVC_FIELD}: {path} on pod {pod}"
    error = body.get("error") if isinstance(body, Mapping) else None
    if code != 200:
        if not 400 <= code < 500:
            return None
        if isinstance(error, Mapping) and error.get("type") in LISTING_REASONS:
            return PagesProblem(LISTING_REASONS[error["type"]], f"{where}: {str(error.get('message'))[:500]}")
        return PagesProblem(PAGES_MISSING, f"{where}: the server answered HTTP {code} to GET /v1/golden "
                                           f"(an image without the golden pages endpoint?)")
    listed = body.get("pages") if isinstance(body, Mapping) else None
    if not isinstance(listed, list) or not listed:
        return PagesProblem(PAGES_INVALID, f"{where}: no page listed")
    pages = _bounded(where, len(listed), _listed_pages(where, listed), "")
    if isinstance(pages, PagesProblem):
        return pages
    return GoldenPages(tuple(pages), _digest(settings, pages), ip)


def pages_pod(pods: Iterable[GatePod], revision: str) -> GatePod | None:
    """The pod that lists the golden pages of the model PVC: one of the revision being rolled out
    (the operator renders GOLDEN_DIR into its pods, with the model volume mounted), the pod the
    gate judges first, else a Ready one."""
    pods = tuple(pods)
    return first_pod(pods, revision, ready=False) or first_pod(pods, revision, ready=True)
