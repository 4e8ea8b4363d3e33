"""The quality gate's verdict: each page's output, its distance to the reference, the judgement
against the thresholds, and the recorded outputs the quality ConfigMap holds. Pure.

The distance of a page is ocr_limits.quality.page_distance, the one the server's shadow pages are
judged by too: rapidfuzz's normalised Levenshtein distance, the edit distance divided by the longer
text's length (0: the same text, 1: nothing in common), the character error rate bounded to 0..1,
rounded to 4 places.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ocr_limits.quality import bounded_text as bounded
from ocr_limits.quality import page_distance as distance
from ocr_operator.spec import QualityGate

from .. import naming
from .outcomes import Judged, judge_rates
from .pages import GoldenPages


@dataclass(frozen=True)
class Output:
    """One page's answer: the text (bounded), its hash, the tokens generated, and the server's
    reference-free outcome (ok, loop, truncated, empty; None from a server that reports none)."""

    page: str
    text: str
    sha256: str
    tokens: int
    outcome: str | None = None

    @classmethod
    def of(cls, page: str, text: str, tokens: int, outcome: str | None = None) -> "Output":
        text = bounded(text)
        return cls(page, text, hashlib.sha256(text.encode()).hexdigest(), int(tokens), outcome)

    def to_json(self) -> dict[str, Any]:
        return {"page": self.page, "text": self.text, "sha256": self.sha256, "tokens": self.tokens}


@dataclass(frozen=True)
class Recording:
    """A revision's outputs on one version (digest) of the golden pages."""

    revision: str
    digest: str
    outputs: tuple[Output, ...]

    def text(self, page: str) -> str | None:
        return next((o.text for o in self.outputs if o.page == page), None)

    def to_json(self) -> dict[str, Any]:
        return {"revision": self.revision, "pagesDigest": self.digest, "pages": [o.to_json() for o in self.outputs]}

    @classmethod
    def from_json(cls, value: Any) -> "Recording | None":
        """A recording read back, or None when it is not one (edited, or another version's)."""
        if not isinstance(value, Mapping) or not isinstance(value.get("revision"), str):
            return None
        try:
            outputs = tuple(Output.of(str(o["page"]), str(o["text"]), int(o.get("tokens") or 0))
                            for o in value.get("pages") or ())
        except (KeyError, TypeError, ValueError):
            return None
        return cls(value["revision"], str(value.get("pagesDigest") or ""), outputs)


@dataclass(frozen=True)
class Verdict:
    passed: bool
    against: str  # what was compared: "expected texts", "revision X", both, or nothing
    distances: tuple[tuple[str, float], ...]
    mean: float
    worst_page: str | None
    worst: float
    message: str
    signal: str | None = None  # the failed criterion: maxLoopRate, maxTruncatedRate, maxEmptyRate, shadow (else None)


def judge(outputs: Iterable[Output], pages: GoldenPages, baseline: Recording | None, gate: QualityGate,
          also: Iterable[Judged] = ()) -> Verdict:
    """The distances (`judge_distances`), then the outcome rates (outcomes.judge_rates) of the
    golden pages' outputs and `also` (the shadow pages): a revision passes when both do; a failed
    rate names its signal first in the message."""
    outputs = tuple(outputs)
    verdict = judge_distances(outputs, pages, baseline, gate)
    failed_rate, rates = judge_rates((*outputs, *also), gate)
    if failed_rate is not None:
        return replace(verdict, passed=False, signal=failed_rate.split(":", 1)[0],
                       message=f"{failed_rate}; {verdict.message}")
    if rates:
        return replace(verdict, message=f"{verdict.message}; {rates}")
    return verdict


def judge_distances(outputs: Iterable[Output], pages: GoldenPages, baseline: Recording | None,
                    gate: QualityGate) -> Verdict:
    """Compare each page's output with its expected text, else with `baseline`'s output on it.
    Passes when the mean is at most maxMeanDistance and every page at most maxPageDistance; a
    page with neither reference (the first revision, no expected text) is not compared."""
    got = {o.page: o.text for o in outputs}
    distances: list[tuple[str, float]] = []
    sources: set[str] = set()
    for page in pages.pages:
        if page.expected is not None:
            reference, source = page.expected, "expected texts"
        elif baseline is not None and baseline.text(page.name) is not None:
            reference, source = baseline.text(page.name), f"revision {baseline.revision}"
        else:
            continue
        sources.add(source)
        distances.append((page.name, distance(reference or "", got.get(page.name, ""))))
    against = " and ".join(sorted(sources)) or "nothing (no expected text and no last good revision)"
    if not distances:
        return Verdict(True, against, (), 0.0, None, 0.0,
                       f"{len(pages.pages)} pages recorded; nothing to compare them with")
    t = thresholds(distances, gate.max_page_distance, gate.max_mean_distance, f"against {against}",
                   lambda name: f"page {name}")
    return Verdict(t.passed, against, tuple(distances), t.mean, t.worst_name, t.worst, t.message)


@dataclass(frozen=True)
class Thresholds:
    """Distances judged against maxPageDistance and maxMeanDistance: the verdict, the mean, the
    worst page (its name as given) and its distance, and the message."""

    passed: bool
    mean: float
    worst_name: str
    worst: float
    message: str


def thresholds(distances: Sequence[tuple[str, float]], max_page: float, max_mean: float, tail: str,
               label: Callable[[str], str]) -> Thresholds:
    """Judge (name, distance) pairs (at least one): every page at most `max_page`, the mean at most
    `max_mean` (both inclusive). The worst is the largest distance (then the largest name); the
    message names the first limit passed, or sums up, with `label(name)` for the worst page and
    `tail` last. The golden pages and the shadow sample are judged by it alike."""
    mean = round(sum(d for _, d in distances) / len(distances), 4)
    worst_name, worst = max(distances, key=lambda item: (item[1], item[0]))
    n, page = len(distances), label(worst_name)
    worst_said = f"{page}: distance {worst:.4f} (maxPageDistance {max_page:g})"
    mean_said = f"mean {mean:.4f} over {n} pages (maxMeanDistance {max_mean:g})"
    if worst > max_page:
        message = f"{page}: distance {worst:.4f} > maxPageDistance {max_page:g}; {mean_said}; {tail}"
    elif mean > max_mean:
        message = f"mean distance {mean:.4f} over {n} pages > maxMeanDistance {max_mean:g}; worst {worst_said}; {tail}"
    else:
        message = f"worst {worst_said}; {mean_said}; {tail}"
    return Thresholds(worst <= max_page and mean <= max_mean, mean, worst_name, worst, message)


# --------------------------------------------------------------------------- the quality ConfigMap


BASELINE_KEY = "baseline.json"
CANDIDATE_KEY = "candidate.json"


@dataclass(frozen=True)
class Records:
    """What the quality ConfigMap holds: the last good revision's outputs (baseline) and the
    outputs of the revision that passed the gate last (candidate: the baseline once it is good)."""

    baseline: Recording | None = None
    candidate: Recording | None = None


def parse_records(configmap: Mapping[str, Any] | None) -> Records:
    data = (configmap or {}).get("data") or {}

    def one(key: str) -> Recording | None:
        try:
            return Recording.from_json(json.loads(data.get(key) or "null"))
        except ValueError:
            return None

    return Records(one(BASELINE_KEY), one(CANDIDATE_KEY))


def records_data(records: Records) -> dict[str, str]:
    """The ConfigMap's data for `records` (render_records)."""
    out = {}
    for key, rec in ((BASELINE_KEY, records.baseline), (CANDIDATE_KEY, records.candidate)):
        if rec is not None:
            out[key] = json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False)
    return out


def render_records(owner: Mapping[str, Any], records: Records) -> dict[str, Any] | None:
    """The quality ConfigMap (the last good revision's outputs and the candidate's), owned by
    the OcrService; None while nothing is recorded."""
    data = records_data(records)
    if not data:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": naming.metadata(owner, naming.quality_name(owner["metadata"]["name"])), "data": data}
