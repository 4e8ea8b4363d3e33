"""The quality gate, pure half: golden pages, the distance, the verdict, the recorded outputs,
and the next step (which pod to ask, which pods to admit). No I/O: gaterun.py sends the pages.

Mechanism (spec.rollout.qualityGate; docs/concepts/quality-gate.md): the pods of a gated
OcrService carry the readiness gate ``GATE_CONDITION``. A pod of a new revision whose containers
are Ready stays out of the Service (the kubelet reports Ready False, reason
ReadinessGatesNotReady) and, with maxUnavailable 0, the Deployment makes no more progress, so the
old pods keep all the traffic. The operator sends every golden page to that pod's IP, compares
each answer with the last good revision's recorded output on the same page (or the page's
expected text) by normalised edit distance, and then either sets the pod condition True on the
revision's pods (the rollout goes on) or fails the revision with QualityRegression (the rollout
state machine's rollback). Every decision is a function of the OcrService status, the quality
ConfigMap and the pods, so an operator restarted mid-gate sends the pages again and decides once.

The distance of a page is rapidfuzz's normalised Levenshtein distance: the edit distance divided
by the longer text's length (0: the same text, 1: nothing in common), the character error rate
bounded to 0..1.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from rapidfuzz.distance import Levenshtein

from ocr_limits.quality import MAX_GOLDEN_BYTES, MAX_GOLDEN_PAGES, MAX_PAGE_TEXT_CHARS

from .spec import QualityGate

# failed_reason values and QualityGate condition reasons (CamelCase, stable).
REASON_QUALITY_REGRESSION = "QualityRegression"
REASON_GATE_ERROR = "QualityGateError"
PAGES_MISSING = "GoldenPagesMissing"
PAGES_INVALID = "GoldenPagesInvalid"
PAGES_TOO_LARGE = "GoldenPagesTooLarge"

# status.qualityGate.phase
RUNNING, RECORDING, WAITING, PASSED, FAILED = "Running", "Recording", "Waiting", "Passed", "Failed"

EXPECTED_SUFFIX = ".txt"
PAGES_FIELD = "spec.rollout.qualityGate.goldenPages.configMapName"
PVC_FIELD = "spec.rollout.qualityGate.goldenPages.pvcPath"


# --------------------------------------------------------------------------- golden pages


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
    if problem := _count_problem(where, len(binary)):
        return problem
    pages: list[Page] = []
    total = 0
    for key in sorted(binary):
        try:
            raw = base64.b64decode(str(binary[key]), validate=True)
        except (binascii.Error, ValueError):
            return PagesProblem(PAGES_INVALID, f"{where}: binaryData key {key} is not base64")
        if not raw:
            return PagesProblem(PAGES_INVALID, f"{where}: binaryData key {key} is empty")
        total += len(raw)
        expected = data.get(key + EXPECTED_SUFFIX) if isinstance(data, Mapping) else None
        if problem := _size_problem(where, total, key, None if expected is None else str(expected), "data key "):
            return problem
        pages.append(Page(key, raw, None if expected is None else str(expected)))
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


# What the server answers (ocr_server/golden.py: error.type) -> the QualityGate condition's reason.
LISTING_REASONS = {"golden_pages_missing": PAGES_MISSING, "golden_pages_too_large": PAGES_TOO_LARGE,
                   "golden_pages_invalid": PAGES_INVALID}
SHA256 = re.compile(r"[0-9a-f]{64}")


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
    if problem := _count_problem(where, len(listed)):
        return problem
    pages: list[Page] = []
    total = 0
    for item in listed:
        ok = isinstance(item, Mapping) and isinstance(item.get("name"), str) and isinstance(item.get("size"), int) \
            and isinstance(item.get("sha256"), str) and SHA256.fullmatch(item["sha256"]) is not None \
            and (item.get("expected") is None or isinstance(item.get("expected"), str))
        if not ok:
            return PagesProblem(PAGES_INVALID, f"{where}: the listing is not one of name, size, sha256, expected")
        total += max(0, item["size"])
        if problem := _size_problem(where, total, item["name"], item.get("expected"), ""):
            return problem
        pages.append(Page(item["name"], b"", item.get("expected"), item["sha256"]))
    return GoldenPages(tuple(pages), _digest(settings, pages), ip)


def pages_pod(pods: Iterable[GatePod], revision: str) -> GatePod | None:
    """The pod that lists the golden pages of the model PVC: one of the revision being rolled out
    (the operator renders GOLDEN_DIR into its pods, with the model volume mounted), the pod the
    gate judges first, else a Ready one."""
    pods = tuple(pods)
    return _first(pods, revision, ready=False) or _first(pods, revision, ready=True)


# --------------------------------------------------------------------------- outputs and distances


def bounded(text: str) -> str:
    """A recorded (and compared) text: at most MAX_PAGE_TEXT_CHARS characters."""
    return text[:MAX_PAGE_TEXT_CHARS]


@dataclass(frozen=True)
class Output:
    """One page's answer: the text (bounded), its hash, the tokens generated."""

    page: str
    text: str
    sha256: str
    tokens: int

    @classmethod
    def of(cls, page: str, text: str, tokens: int) -> "Output":
        text = bounded(text)
        return cls(page, text, hashlib.sha256(text.encode()).hexdigest(), int(tokens))

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


def distance(reference: str, candidate: str) -> float:
    """Normalised edit distance, 0..1 (rapidfuzz): Levenshtein distance / the longer length."""
    return float(Levenshtein.normalized_distance(bounded(reference), bounded(candidate)))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    against: str  # what was compared: "expected texts", "revision X", both, or nothing
    distances: tuple[tuple[str, float], ...]
    mean: float
    worst_page: str | None
    worst: float
    message: str


def judge(outputs: Iterable[Output], pages: GoldenPages, baseline: Recording | None, gate: QualityGate) -> Verdict:
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
        distances.append((page.name, round(distance(reference or "", got.get(page.name, "")), 4)))
    against = " and ".join(sorted(sources)) or "nothing (no expected text and no last good revision)"
    if not distances:
        return Verdict(True, against, (), 0.0, None, 0.0,
                       f"{len(pages.pages)} pages recorded; nothing to compare them with")
    mean = round(sum(d for _, d in distances) / len(distances), 4)
    worst_page, worst = max(distances, key=lambda item: (item[1], item[0]))
    page_ok = worst <= gate.max_page_distance
    mean_ok = mean <= gate.max_mean_distance
    summary = (f"worst page {worst_page}: distance {worst:.4f} (maxPageDistance {gate.max_page_distance:g}); "
               f"mean {mean:.4f} over {len(distances)} pages (maxMeanDistance {gate.max_mean_distance:g}); "
               f"against {against}")
    if not page_ok:
        message = (f"page {worst_page}: distance {worst:.4f} > maxPageDistance {gate.max_page_distance:g}; "
                   f"mean {mean:.4f} over {len(distances)} pages (maxMeanDistance {gate.max_mean_distance:g}); "
                   f"against {against}")
    elif not mean_ok:
        message = (f"mean distance {mean:.4f} over {len(distances)} pages > maxMeanDistance "
                   f"{gate.max_mean_distance:g}; worst page {worst_page}: distance {worst:.4f} "
                   f"(maxPageDistance {gate.max_page_distance:g}); against {against}")
    else:
        message = summary
    return Verdict(page_ok and mean_ok, against, tuple(distances), mean, worst_page, worst, message)


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
    """The ConfigMap's data for `records` (rendered by render/quality.py)."""
    out = {}
    for key, rec in ((BASELINE_KEY, records.baseline), (CANDIDATE_KEY, records.candidate)):
        if rec is not None:
            out[key] = json.dumps(rec.to_json(), sort_keys=True, ensure_ascii=False)
    return out


# --------------------------------------------------------------------------- jobs and their results


GATE, RECORD = "gate", "record"


@dataclass(frozen=True)
class Job:
    """Send the golden pages to one pod. `kind` gate: judge its revision; record: its outputs
    become the baseline. `attempt` is the rollout's startedAt: a result of another attempt is
    never applied."""

    kind: str
    revision: str
    pod: str
    ip: str
    attempt: str | None
    digest: str

    @property
    def key(self) -> tuple[str, str, str, str | None, str]:
        return (self.kind, self.revision, self.pod, self.attempt, self.digest)


@dataclass(frozen=True)
class Result:
    """A finished job: each page's output, or the error that stopped it, and the seconds it took."""

    job: Job
    outputs: tuple[Output, ...] = ()
    error: str | None = None
    seconds: float = 0.0


# --------------------------------------------------------------------------- the pods


class GatePod(Protocol):
    """What the gate reads of one pod (rollout.PodView has these fields)."""

    name: str
    revision: str | None
    ready: bool
    awaiting_gate: bool  # containers Ready, held back only by the readiness gate
    ip: str | None
    deleting: bool


# --------------------------------------------------------------------------- deciding


@dataclass(frozen=True)
class Outcome:
    """A finished job applied to the state: the gate record for status.qualityGate, the records,
    and for a failed gate the failure (reason, message) the rollout fails the revision with."""

    record: dict[str, Any] | None
    records: Records
    failure: tuple[str, str] | None = None
    verdict: Verdict | None = None


def conclude(result: Result | None, *, gate: QualityGate | None, pages: GoldenPages | PagesProblem | None,
             records: Records, prior_record: Mapping[str, Any] | None, current_revision: str | None,
             last_good: str | None, attempt: str | None, progressing: bool) -> Outcome:
    """Apply a finished job, if it still belongs to the state: a gate result for the revision
    being rolled out in this attempt, on these pages; a record result for the last good
    revision on these pages. Anything else is dropped (the spec moved on meanwhile)."""
    prior = dict(prior_record) if prior_record else None
    if result is None or gate is None or not isinstance(pages, GoldenPages) or result.job.digest != pages.digest:
        return Outcome(prior, records)
    job = result.job
    if job.kind == RECORD:
        if job.revision != last_good or result.error is not None:
            return Outcome(prior, records)
        return Outcome(prior, Records(Recording(job.revision, job.digest, result.outputs), records.candidate))
    if not progressing or job.revision != current_revision or job.attempt != attempt:
        return Outcome(prior, records)
    base = {"revision": job.revision, "attempt": job.attempt, "pagesDigest": job.digest, "pod": job.pod,
            "seconds": round(result.seconds, 2)}
    if result.error is not None:
        message = f"pod {job.pod} did not answer the golden pages: {result.error}"
        return Outcome({**base, "phase": FAILED, "reason": REASON_GATE_ERROR, "message": message}, records,
                       (REASON_GATE_ERROR, message))
    baseline = records.baseline if records.baseline is not None and records.baseline.digest == job.digest else None
    verdict = judge(result.outputs, pages, baseline, gate)
    record = {**base, "phase": PASSED if verdict.passed else FAILED, "against": verdict.against,
              "meanDistance": verdict.mean, "worstPage": verdict.worst_page, "worstDistance": verdict.worst,
              "pages": [{"name": n, "distance": d} for n, d in verdict.distances], "message": verdict.message}
    if not verdict.passed:
        return Outcome({**record, "reason": REASON_QUALITY_REGRESSION}, records,
                       (REASON_QUALITY_REGRESSION, verdict.message), verdict)
    candidate = Recording(job.revision, job.digest, result.outputs)
    return Outcome(record, Records(records.baseline, candidate), None, verdict)


@dataclass(frozen=True)
class Step:
    """What to do now: pods to admit (condition True), a job to run, the state to persist and
    the QualityGate condition (status, reason, message), or None without a gate."""

    admit: tuple[str, ...] = ()
    job: Job | None = None
    record: dict[str, Any] | None = None
    records: Records = Records()
    condition: tuple[str, str, str] | None = None


def _baseline_ok(records: Records, last_good: str | None, pages: GoldenPages) -> bool:
    b = records.baseline
    return b is not None and b.revision == last_good and b.digest == pages.digest


def _first(pods: Iterable[GatePod], revision: str, *, ready: bool) -> GatePod | None:
    """The first pod (by name) of `revision` with an IP that is Ready (`ready`) or awaiting the gate."""
    found = [p for p in pods if p.revision == revision and not p.deleting and p.ip
             and (p.ready if ready else p.awaiting_gate)]
    return min(found, key=lambda p: p.name) if found else None


def next_step(*, gate: QualityGate | None, pages: GoldenPages | PagesProblem | None, outcome: Outcome,
              pods: Iterable[GatePod], phase: str | None, current_revision: str | None, last_good: str | None,
              attempt: str | None, progressing: bool) -> Step:
    """The gate's step after the rollout decided (`phase`, `current_revision`, `last_good` are the
    decision's). Admitted: pods of the last good revision, and of the revision whose gate passed
    in this attempt; without a gate only the former (a rollback to a gated revision)."""
    pods = tuple(pods)
    record, records = outcome.record, outcome.records
    if progressing and record and record.get("phase") == FAILED and record.get("attempt") != attempt:
        record = None  # a new attempt (the spec went back, or on): the failure it reported is history
    passed = {last_good} - {None}
    if record and record.get("phase") == PASSED and record.get("attempt") == attempt:
        passed.add(record.get("revision"))
    admit = tuple(sorted(p.name for p in pods if p.awaiting_gate and not p.deleting and p.revision in passed))
    if gate is None:
        return Step(admit, None, None, Records(), None)
    c = records.candidate
    if c is not None and last_good is not None and c.revision == last_good and records.baseline != c:
        records = Records(c, c)  # the revision that passed the gate is now the last good one
    step = Step(admit, None, record, records, _condition(record))
    revision = current_revision
    gating = progressing and revision is not None and revision not in passed
    if isinstance(pages, PagesProblem):  # read because a rollout needs them: a gate waits, a new one is held
        held = {"revision": revision, "attempt": attempt, "phase": WAITING, "message": pages.message}
        return Step(admit, None, held if gating else record, records, ("False", pages.reason, pages.message))
    if not gating or revision is None:
        if not progressing and record and record.get("phase") in (WAITING, RUNNING, RECORDING):
            # The rollout ended (a crash rolled the revision back, or the spec went back) before its
            # gate decided: the persisted step is history, not something still being waited for.
            message = (f"no revision awaits the gate: revision {record.get('revision')} left the rollout "
                       f"before its gate decided; revision {current_revision} serves")
            return replace(step, condition=("True", "NoRevisionPending", message))
        return step
    if (record or {}).get("revision") == revision and record.get("attempt") == attempt \
            and record.get("phase") == FAILED:
        return step
    if pages is None:  # pages on the model PVC: listed by the revision's pod, not up yet
        return _waiting_for_pod(admit, revision, attempt, records)
    if pages.need_baseline and last_good is not None and not _baseline_ok(records, last_good, pages):
        source = _first(pods, last_good, ready=True)
        if source is None:
            message = (f"the golden pages changed (or were never recorded) and no Ready pod of the last good "
                       f"revision {last_good} can record them")
            return Step(admit, None, {"revision": revision, "attempt": attempt, "phase": WAITING, "message": message},
                        records, ("Unknown", "WaitingForBaseline", message))
        message = f"recording the last good revision {last_good}'s outputs on {len(pages.pages)} golden pages " \
                  f"from pod {source.name}"
        return Step(admit, Job(RECORD, last_good, source.name, source.ip or "", attempt, pages.digest),
                    {"revision": revision, "attempt": attempt, "phase": RECORDING, "pod": source.name,
                     "message": message}, records, ("Unknown", "RecordingBaseline", message))
    target = _first(pods, revision, ready=False)
    if target is None:
        return _waiting_for_pod(admit, revision, attempt, records)
    message = f"sending {len(pages.pages)} golden pages to pod {target.name} of revision {revision}"
    return Step(admit, Job(GATE, revision, target.name, target.ip or "", attempt, pages.digest),
                {"revision": revision, "attempt": attempt, "phase": RUNNING, "pod": target.name, "message": message},
                records, ("Unknown", "GateRunning", message))


def _waiting_for_pod(admit: tuple[str, ...], revision: str, attempt: str | None, records: Records) -> Step:
    message = f"waiting for a pod of revision {revision} to load its model"
    return Step(admit, None, {"revision": revision, "attempt": attempt, "phase": WAITING, "message": message},
                records, ("Unknown", "WaitingForPod", message))


def _condition(record: Mapping[str, Any] | None) -> tuple[str, str, str] | None:
    """The QualityGate condition a persisted verdict reports."""
    if not record:
        return None
    phase = record.get("phase")
    revision = record.get("revision")
    if phase == PASSED:
        return ("True", "GatePassed", f"revision {revision} passed: {record.get('message', '')}")
    if phase == FAILED:
        return ("False", record.get("reason") or REASON_QUALITY_REGRESSION,
                f"revision {revision} failed: {record.get('message', '')}")
    return ("Unknown", "GateRunning" if phase == RUNNING else phase or "Waiting", record.get("message") or "")


def budget_seconds(gate: QualityGate | None, pages: GoldenPages | PagesProblem | None) -> float:
    """Extra startup time a gated pod may take: recording the baseline and the gate itself, each
    at most one timeout per page (pages sent one at a time)."""
    if gate is None:
        return 0.0
    count = len(pages.pages) if isinstance(pages, GoldenPages) else 1
    return 2.0 * count * gate.timeout_seconds
