"""spec.rollout: probes, the rollback budget, and the quality gate's golden and shadow pages (bounds:
ocr_limits.quality)."""

from __future__ import annotations

from ocr_limits import quality as gate
from ocr_limits.quality import GOLDEN_DIR_ENV

from ..fields import PERCENT, PERCENT_UP_TO_100, IntOrString, Rule, api, model

GOLDEN_SOURCE_ERROR = ("spec.rollout.qualityGate.goldenPages: set exactly one of configMapName (a ConfigMap's "
                       "binaryData) and pvcPath (a folder on the model PVC)")


@model
class HealthCheck:
    path: str = api("Readiness and startup probe path (200 only once the model is loaded and warmed up).",
                    pattern="^/.*", max_length=1024, default="/health/ready")
    liveness_path: str = api("Liveness probe path (200 while the process is responsive).", pattern="^/.*",
                             max_length=1024, default="/health/live")
    period_seconds: int = api("Seconds between probes.", minimum=1, maximum=300, default=10)
    timeout_seconds: int = api("Seconds before a probe counts as failed.", minimum=1, maximum=300, default=5)
    failure_threshold: int = api("Consecutive failed probes before the pod is unready (readiness) or restarted "
                                 "(liveness); a new revision whose pods fail this many is rolled back.", minimum=1,
                                 maximum=100, default=5)


@model
class GoldenPages:
    __description__ = (
        "Where the golden pages are: a ConfigMap (configMapName) or a folder on the model PVC (pvcPath), exactly one. "
        f"Either way at most {gate.MAX_GOLDEN_PAGES} pages and {gate.MAX_GOLDEN_BYTES} bytes of pages in all, each "
        f"expected text at most {gate.MAX_PAGE_TEXT_CHARS} characters; more holds the rollout (condition QualityGate "
        "False, reason GoldenPagesTooLarge).")
    __rules__ = (Rule("has(self.configMapName) != has(self.pvcPath)", GOLDEN_SOURCE_ERROR,
                      holds=lambda g: (g.config_map_name is None) != (g.pvc_path is None)),)

    config_map_name: str | None = api(
        "A ConfigMap in the OcrService's namespace: each binaryData key is one page (PNG, JPEG, TIFF or PDF bytes); "
        "a data key `<page key>.txt` is that page's expected text (ground truth), compared instead of the last good "
        "revision's output.", min_length=1, max_length=253)
    pvc_path: str | None = api(
        "A folder inside the model volume (spec.model.pvc, below its subPath; needs spec.model.pvc): each regular "
        "file in it is one page, a file `<page>.txt` beside it that page's expected text; sub-folders and hidden "
        "files are skipped, a symbolic link is refused. The operator mounts no PVC: the new revision's pods see the "
        f"folder ({GOLDEN_DIR_ENV}, below spec.model.cacheDir) and serve it read-only (GET /v1/golden); the gate "
        "reads the pages from the pod it judges, so that pod starts (and takes no traffic) before the pages are "
        "known. A relative path of segments that never start with a dot (so no '..').",
        min_length=1, max_length=gate.MAX_GOLDEN_PATH_CHARS, pattern=gate.GOLDEN_PATH_PATTERN,
        sets_env=(GOLDEN_DIR_ENV,))


def _rate(outcome: str, pages: str, more: str = ""):
    """A reference-free criterion of the gate: the share of its pages with one server outcome."""
    return api(f"Largest share of the gate's pages {pages} (the server's page outcome `{outcome}`, as in "
               f"ocr_page_outcomes_total), 0..1; above it the revision fails with QualityRegression naming this "
               f"field. Unset: not judged. Needs no reference, so it judges the first revision too.{more}",
               minimum=0, maximum=1)


@model
class Shadow:
    __description__ = (
        "Shadow pages: while the new revision's first pod is held back by the readiness gate, the serving pods "
        "(the last good revision) copy a sample of their live POST /v1/ocr requests to it, each after the client's "
        "answer was sent, and the gate compares the held pod's answer with the one the client got (the same "
        "distance as the golden pages). No client sees the held pod's answer or waits for a copy. A request whose "
        "client asked for no retention (header Cache-Control: no-store or X-OCR-Retention: none) is never copied, "
        "nor a streamed one. The copies live only in the serving pod's memory (at most "
        f"{gate.MAX_SHADOW_QUEUE_PAGES} pages and {gate.MAX_SHADOW_QUEUE_BYTES // (1024 * 1024)} MiB waiting in "
        "each) until the held pod answered; the gate's result keeps distances, outcomes and sha256 hashes, never a "
        "page or a text. The gate arms the serving pods with its own key (the pods get it with this field or "
        "spec.auth): adding this field without spec.auth gives the pods the key in that same revision, so its "
        "serving pods cannot be armed yet and it is judged on its golden pages only. A revision passes when both "
        "the golden pages and the shadow sample pass; a shadow failure is QualityRegression naming the shadow "
        "sample. The first revision (no last good one) has no shadow sample.")

    sample_percent: int = api("Share of the serving pods' eligible live requests copied, in percent.", minimum=1,
                              maximum=100, default=gate.DEFAULT_SHADOW_SAMPLE_PERCENT)
    max_pages: int = api("Shadow pages judged at most: the gate stops waiting once this many are judged (each "
                         "serving pod copies at most this many).", minimum=1, maximum=gate.MAX_SHADOW_PAGES,
                         default=gate.DEFAULT_SHADOW_MAX_PAGES)
    max_seconds: int = api(
        "How long the serving pods copy requests, from the start of the gate; it also extends the new pods' "
        "startup budget. With fewer pages judged by then the verdict takes those (none: the golden pages alone "
        "decide, and the status says so).", minimum=gate.MIN_SHADOW_SECONDS, maximum=gate.MAX_SHADOW_SECONDS,
        default=gate.DEFAULT_SHADOW_SECONDS)
    noise_pages: int = api(
        "Of the first copies, how many the serving pod also answers a second time itself: the largest distance "
        "between its own two answers is the noise floor, taken off each shadow page's distance before it is judged "
        "(0: no floor).", minimum=0, maximum=gate.MAX_SHADOW_NOISE_PAGES, default=gate.DEFAULT_SHADOW_NOISE_PAGES)
    max_mean_distance: float | None = api("Largest mean distance over the shadow pages (after the noise floor); "
                                          "unset: the gate's maxMeanDistance.", minimum=0, maximum=1)
    max_page_distance: float | None = api("Largest distance of any one shadow page (after the noise floor); unset: "
                                          "the gate's maxPageDistance.", minimum=0, maximum=1)


@model
class QualityGate:
    """spec.rollout.qualityGate: golden pages compared before a new revision takes traffic (the
    operator's gate decides, its runner sends the pages). Bounds: ocr_limits.quality."""

    config_map: str | None = api(json="goldenPages", via=(GoldenPages, "config_map_name"), required=True)
    pvc_path: str | None = api(json="goldenPages", via=(GoldenPages, "pvc_path"), required=True)
    max_mean_distance: float = api(
        "Largest mean normalised edit distance over the pages (Levenshtein distance / the longer text's length; 0 "
        "the same text, 1 nothing in common).", minimum=0, maximum=1, default=gate.DEFAULT_MAX_MEAN_DISTANCE)
    max_page_distance: float = api("Largest normalised edit distance of any one page.", minimum=0, maximum=1,
                                   default=gate.DEFAULT_MAX_PAGE_DISTANCE)
    max_new_tokens: int = api("New-token budget of each gate request (at most spec.inference.maxNewTokens).",
                              minimum=1, maximum=gate.MAX_GATE_MAX_NEW_TOKENS, default=gate.DEFAULT_GATE_MAX_NEW_TOKENS)
    timeout_seconds: int = api("Deadline of each gate request (at most spec.inference.timeoutSeconds); the pages' "
                               "time also extends the new pods' startup budget.", minimum=1,
                               maximum=gate.MAX_GATE_TIMEOUT_SECONDS, default=gate.DEFAULT_GATE_TIMEOUT_SECONDS)
    max_loop_rate: float | None = _rate("loop", "whose output repeats itself")
    max_truncated_rate: float | None = _rate(
        "truncated", "cut off by the token budget before their end",
        " The gate's budget is maxNewTokens: set it above the golden pages' longest text.")
    max_empty_rate: float | None = _rate("empty", "answered with no text")
    shadow: Shadow | None = api()


def _zero(value: int | str) -> bool:
    return value == 0 or (isinstance(value, str) and value.rstrip("%").strip("0") == "" and value.endswith("%"))


@model
class Rollout:
    __rules__ = (Rule("!has(self.maxSurge) || !has(self.maxUnavailable) || "
                      "!((type(self.maxSurge) == int ? self.maxSurge == 0 : self.maxSurge.matches('^0+%$')) && "
                      "(type(self.maxUnavailable) == int ? self.maxUnavailable == 0 : "
                      "self.maxUnavailable.matches('^0+%$')))",
                      "spec.rollout.maxSurge and spec.rollout.maxUnavailable cannot both be 0: a rollout could then "
                      "neither start a new pod nor stop an old one", ".maxUnavailable",
                      lambda r: not (_zero(r.max_surge) and _zero(r.max_unavailable))),
                 Rule("!has(self.progressDeadlineSeconds) || !has(self.modelLoadTimeoutSeconds) || "
                      "self.progressDeadlineSeconds > self.modelLoadTimeoutSeconds",
                      "spec.rollout.progressDeadlineSeconds must be greater than spec.rollout.modelLoadTimeoutSeconds, "
                      "or every slow model load fails the rollout", ".progressDeadlineSeconds",
                      lambda r: r.progress_deadline_seconds > r.model_load_timeout_seconds),)

    health_check: HealthCheck = api("Probes of the server's health endpoints.", default={})
    model_load_timeout_seconds: int = api("Budget for loading the model; the startup probe allows this long before "
                                          "liveness takes over.", minimum=1, maximum=86400, default=900)
    progress_deadline_seconds: int = api("The Deployment's progress deadline; exceeding it fails the revision.",
                                         minimum=2, maximum=172800, default=1800)
    auto_rollback: bool = api("Restore the last good pod template when a new revision fails.", default=True)
    max_surge: IntOrString = api("Extra pods during a rollout (a count, or a percentage of the replicas such as "
                                 "'25%'), each with its GPUs: the new pods start beside the old ones.", default=1,
                                 minimum=0, pattern=PERCENT)
    max_unavailable: IntOrString = api(
        "Old pods a rollout may stop before their replacements are Ready (a count, or a percentage up to '100%'). "
        "0 (the default) keeps every old pod serving until a new one is Ready, which needs room for maxSurge more "
        "pods; where the GPUs or the namespace's quota have no room for one more pod, set maxSurge 0 and "
        "maxUnavailable 1: each old pod then stops first and frees its GPUs for its replacement (capacity dips by "
        "one pod meanwhile). A quality gate comparing with the last good revision, and shadow pages, need a Ready "
        "pod of it while the new revision is gated: keep maxUnavailable below the replicas.", default=0, minimum=0,
        pattern=PERCENT_UP_TO_100)
    settle_seconds: int = api(
        "Seconds all new pods must stay Ready (in their own reports and in the Deployment's count; Ready turns True "
        "when this period starts) before the revision counts as good. A spec change inside this period still keeps "
        "the revision as the rollback target when all its pods were Ready at the previous reconcile and still are "
        "when the change is seen (a pod that lost readiness meanwhile disqualifies it).", minimum=0, maximum=3600,
        default=30)
    max_restarts: int = api("Container restarts of a new pod that fail the revision.", minimum=0, maximum=100,
                            default=3)
    unschedulable_grace_seconds: int = api("How long a new pod may stay unschedulable (no free GPU), or the "
                                           "Deployment refuse to create the new pods (FailedCreate: a ResourceQuota, "
                                           "a missing RuntimeClass, admission), before the revision fails.",
                                           minimum=0, maximum=86400, default=300)
    revision_history_limit: int = api("Old ReplicaSets and stored pod templates kept for rollback.", minimum=1,
                                      maximum=50, default=5)
    quality_gate: QualityGate | None = api(
        "Compare a new revision's OCR output on golden pages with the last good revision's (or with expected texts) "
        "before it takes traffic. Pods of a gated OcrService carry the readiness gate ocr.causalflow.dev/quality-gate: "
        "when the first pod of a new revision has loaded its model (its containers Ready), the operator sends each "
        "golden page straight to that pod's IP (greedy, the settings clients get, one page at a time) while the old "
        "pods keep serving; no pod of the new revision serves a client before the gate passes. A pass sets the pod "
        "condition True on its pods and the rollout goes on; a failure fails the revision with reason "
        "QualityRegression (rolled back like a health failure). Golden pages that are missing or too large hold the "
        "rollout (condition QualityGate False). With spec.auth or shadow the gate sends its own key, from a Secret "
        "<name>-gate-key the operator creates, owns and rotates; the pods take that key only on the gate's requests to "
        "themselves (the golden pages, /v1/ocr and /v1/shadow addressed to the pod's IP).")
