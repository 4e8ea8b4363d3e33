"""The shadow sample's verdict (spec.rollout.qualityGate.shadow). Pure: shadowrun.py arms the
serving pods and reads back what they recorded; this reads those answers and judges them.

While the new revision's pod is held back by the readiness gate, each Ready pod of the last good
revision copies a sample of its live POST /v1/ocr requests to the held pod after the client's
answer was sent, and records per copy only hashes, the distance between its own answer and the
held pod's (ocr_limits.quality.page_distance, the golden pages' distance), both answers' page
outcomes and the held pod's seconds. For its first `noisePages` copies it also answers the page a
second time itself: the largest distance between its two answers is the noise floor, the
distance the serving revision has with itself, taken off each copy's before it is judged.

A page is judged when the held pod answered it (a refusal that was not retried counts as
distance 1); a copy without an answer (timeout, connection) is an error. The sample fails when
its worst judged page is over maxPageDistance or their mean over maxMeanDistance (the shadow's
own, else the gate's). No page judged by maxSeconds: the golden pages alone decide, and the
message says so. The candidate's outcomes join the golden pages' in the outcome rates
(outcomes.judge_rates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ocr_limits.quality import MAX_SHADOW_NOISE_PAGES, MAX_SHADOW_PAGES
from ocr_operator.spec import QualityGate

from .outcomes import SEVERITY
from .verdict import Verdict, thresholds

PREFIX = "shadow sample:"
SIGNAL = "shadow"  # Verdict.signal of a failed shadow sample
HASH_CHARS = 12  # of a page's sha256, naming it in a message


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def label(sha256: str) -> str:
    """A shadow page's name in a message: its document's sha256, shortened."""
    return f"shadow page {sha256[:HASH_CHARS]}"


def _text(value: Any, limit: int = 200) -> str | None:
    return str(value)[:limit] if value is not None else None


@dataclass(frozen=True)
class ShadowPage:
    """One copy as a serving pod recorded it: hashes, distance, outcomes; never a text."""

    pod: str
    sha256: str
    distance: float | None  # None: no answer (error)
    status: int | None = None  # the held pod's refusal (then distance 1)
    serving_outcome: str | None = None
    candidate_outcome: str | None = None
    seconds: float | None = None
    error: str | None = None

    @property
    def judged(self) -> bool:
        return self.error is None and self.distance is not None

    @property
    def page(self) -> str:
        """Its name in a message (outcomes.judge_rates names pages by it)."""
        return label(self.sha256)

    @property
    def outcome(self) -> str | None:
        """The held pod's outcome: what the gate's outcome rates judge."""
        return self.candidate_outcome

    @classmethod
    def from_json(cls, pod: str, value: Any) -> "ShadowPage | None":
        if not isinstance(value, Mapping):
            return None
        distance = _float(value.get("distance"))
        status = value.get("status")

        def outcome(key: str) -> str | None:
            return value.get(key) if value.get(key) in SEVERITY else None

        return cls(pod, str(value.get("sha256") or "")[:64], None if distance is None else min(1.0, max(0.0, distance)),
                   status if isinstance(status, int) and not isinstance(status, bool) else None,
                   outcome("servingOutcome"), outcome("candidateOutcome"), _float(value.get("seconds")),
                   _text(value.get("error")) or (None if distance is not None else "no distance recorded"))


@dataclass(frozen=True)
class ShadowResult:
    """What the serving pods recorded in one gate run, and what failed on the way."""

    pages: tuple[ShadowPage, ...] = ()
    noise: tuple[float, ...] = ()  # the serving revision's distances with itself
    sampled: int = 0
    errors: tuple[str, ...] = ()  # a serving pod's shadow endpoints that failed ("pod x: PUT /v1/shadow: ...")
    seconds: float = 0.0  # from arming to the last answer read
    armed: tuple[str, ...] = ()  # the pods armed


def read_answer(pod: str, body: Any) -> ShadowResult:
    """A serving pod's GET or DELETE /v1/shadow answer, bounded (at most MAX_SHADOW_PAGES pages and
    MAX_SHADOW_NOISE_PAGES noise distances are read); an error when it is no such answer."""
    if not isinstance(body, Mapping) or not isinstance(body.get("pages", []), list):
        return ShadowResult(errors=(f"pod {pod}: the shadow answer is not a JSON object with pages",))
    pages = tuple(p for p in (ShadowPage.from_json(pod, v) for v in body.get("pages", [])[:MAX_SHADOW_PAGES]) if p)
    noise_list = body.get("noise") if isinstance(body.get("noise"), list) else []
    noise = tuple(min(1.0, max(0.0, d)) for d in (_float(n.get("distance")) if isinstance(n, Mapping) else None
                                                  for n in noise_list[:MAX_SHADOW_NOISE_PAGES]) if d is not None)
    sampled = body.get("sampled")
    return ShadowResult(pages, noise, sampled if isinstance(sampled, int) and sampled >= 0 else len(pages), armed=(pod,))


def merge(results: Iterable[ShadowResult], seconds: float = 0.0) -> ShadowResult:
    """The pods' results as one sample."""
    results = tuple(results)
    return ShadowResult(tuple(p for r in results for p in r.pages), tuple(n for r in results for n in r.noise),
                        sum(r.sampled for r in results), tuple(e for r in results for e in r.errors), round(seconds, 2),
                        tuple(a for r in results for a in r.armed))


@dataclass(frozen=True)
class ShadowVerdict:
    passed: bool
    pages: int  # judged
    sampled: int
    errors: int
    mean: float | None
    worst: float | None
    noise_floor: float
    seconds: float
    message: str

    def to_status(self) -> dict[str, Any]:
        """status.qualityGate.shadow."""
        out = {"pages": self.pages, "sampled": self.sampled, "errors": self.errors, "meanDistance": self.mean,
               "worstDistance": self.worst, "noiseFloor": self.noise_floor, "seconds": self.seconds,
               "message": self.message}
        return {k: v for k, v in out.items() if v is not None}


def judge(result: ShadowResult | None, gate: QualityGate) -> ShadowVerdict | None:
    """The shadow sample's verdict; None without spec.rollout.qualityGate.shadow."""
    shadow = gate.shadow
    if shadow is None:
        return None
    if result is None:
        return ShadowVerdict(True, 0, 0, 0, None, None, 0.0, 0.0,
                             f"{PREFIX} not taken: no Ready pod of a last good revision to copy live requests from")
    floor = round(max(result.noise, default=0.0), 4)
    judged = [(p, round(max(0.0, p.distance - floor), 4)) for p in result.pages if p.judged and p.distance is not None]
    errors = sum(1 for p in result.pages if not p.judged) + len(result.errors)
    counts = f"{result.sampled} sampled, {errors} errors"
    if not judged:
        first = f"; {result.errors[0]}" if result.errors else ""
        return ShadowVerdict(True, 0, result.sampled, errors, None, None, floor, result.seconds,
                             f"{PREFIX} no page judged within maxSeconds {shadow.max_seconds} ({counts}{first}): "
                             f"the golden pages alone decide")
    max_page = shadow.max_page_distance if shadow.max_page_distance is not None else gate.max_page_distance
    max_mean = shadow.max_mean_distance if shadow.max_mean_distance is not None else gate.max_mean_distance
    t = thresholds([(p.sha256, d) for p, d in judged], max_page, max_mean, f"noise floor {floor:.4f}; {counts}",
                   label)
    message = f"{PREFIX} {t.message}" if not t.passed else f"{PREFIX} {len(judged)} pages judged; {t.message}"
    return ShadowVerdict(t.passed, len(judged), result.sampled, errors, t.mean, t.worst, floor, result.seconds, message)


def combine(golden: Verdict, shadow: ShadowVerdict | None) -> Verdict:
    """The revision's verdict: it passes when both the golden pages and the shadow sample pass. A
    failure names what failed first: the golden pages' (or an outcome rate's) before the shadow's."""
    if shadow is None:
        return golden
    if shadow.passed or not golden.passed:
        return replace(golden, message=f"{golden.message}; {shadow.message}")
    return replace(golden, passed=False, signal=SIGNAL, message=f"{shadow.message}; golden pages: {golden.message}")
