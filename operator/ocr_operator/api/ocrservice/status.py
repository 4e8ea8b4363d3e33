"""OcrServiceStatus: the observed state the operator writes (a model for the CRD's schema; the
operator builds it in its status module)."""

from __future__ import annotations

from ..conditions import Condition
from ..fields import api, model


@model
class RolloutRecord:
    phase: str | None = api("Progressing, Healthy, Failed, RolledBack or NoGoodRevision.")
    current_digest: str | None = api(
        "Full sha256 of the current revision's pod template (the revision is its first 10 hex digits).")
    last_good_digest: str | None = api(
        "Full sha256 of the last good revision's pod template: a rollback applies the template stored in the "
        "revision history's ConfigMap (named after the OcrService, ending in -revisions) only when it hashes to "
        "this, so an edited or forged history entry is refused (RollbackRefused).")


@model
class PageDistance:
    """One page and its distance."""

    name: str | None = api("The page's binaryData key.")
    distance: float | None = api("Its normalised edit distance.")


@model
class ShadowStatus:
    """The shadow sample's verdict (spec.rollout.qualityGate.shadow): counts and distances only."""

    pages: int | None = api("Shadow pages judged (the held pod answered them).")
    sampled: int | None = api("Live requests the serving pods copied.")
    errors: int | None = api("Copies the held pod gave no answer to, and serving pods whose shadow endpoints failed.")
    mean_distance: float | None = api("Mean distance of the judged pages, after the noise floor.")
    worst_distance: float | None = api("Largest distance of a judged page, after the noise floor.")
    noise_floor: float | None = api("The largest distance between the serving revision's own two answers to a page "
                                    "(taken off each page's distance).")
    seconds: float | None = api("Seconds from the serving pods' arming to the sample's end.")
    message: str | None = api("The shadow verdict: the counts, and a failure's worst page (by its sha256) and "
                              "threshold.")


@model
class QualityGateStatus:
    revision: str | None = api("The revision judged.")
    attempt: str | None = api("The rollout attempt (its start time) the verdict belongs to.")
    phase: str | None = api("Waiting, Recording (the last good revision's outputs), Running, Passed or Failed.")
    reason: str | None = api("Why it failed (QualityRegression, QualityGateError).")
    message: str | None = api("The verdict or what the gate waits for; a failure names the worst page, its distance "
                              "and the threshold.")
    pod: str | None = api("The pod the golden pages were sent to.")
    pages_digest: str | None = api("Digest of the golden pages and expected texts compared.")
    against: str | None = api("What the outputs were compared with (expected texts, or the last good revision's "
                              "recorded outputs).")
    mean_distance: float | None = api("Mean normalised edit distance of the judged revision over the golden pages.")
    worst_page: str | None = api("The page with the largest distance.")
    worst_distance: float | None = api("That page's distance.")
    seconds: float | None = api("Seconds the golden pages took on the pod.")
    pages: tuple[PageDistance, ...] = api("Each compared page's distance.", max_items=16)
    shadow: ShadowStatus | None = api("The shadow sample's verdict (spec.rollout.qualityGate.shadow).")


@model
class ModelFetchStatus:
    """A pod's model-fetch init container at work (spec.model.source.s3), from its last progress line."""

    pod: str | None = api("The pod whose fetch is shown (the first of the revision's pods that fetch).")
    percent: float | None = api("Bytes fetched, in percent of the model's.")
    bytes: int | None = api("Bytes fetched and verified or in flight.", format="int64")
    total_bytes: int | None = api("The model's bytes under the S3 prefix.", format="int64")
    files: int | None = api("Files fetched and verified.")
    total_files: int | None = api("The model's files.")


@model
class RunningModel:
    """The weights of the pod template the Deployment runs (after a rollback, the last good revision's)."""

    source: str | None = api("Where they come from: image (spec.model.source.image), s3, pvc, or serverImage "
                             "(inside the server image).")
    reference: str | None = api("The image reference, S3 URL, claim name or server image.")
    digest: str | None = api("The image's digest (sha256:...), for source image.")


@model
class OcrServiceStatus:
    """Observed state, written by the operator only."""

    observed_generation: int | None = api("metadata.generation the status describes.", format="int64")
    conditions: tuple[Condition, ...] = api("Ready, Available, Progressing, Degraded, (with autoscaling) "
                                            "ScalingActive, (with a quality gate) QualityGate and (with weights "
                                            "from S3) ModelFetching.", list_map_keys=("type",))
    replicas: int | None = api("Pods of the Deployment (scale subresource).")
    ready_replicas: int | None = api("Ready pods.")
    updated_replicas: int | None = api("Pods running the current pod template.")
    desired_replicas: int | None = api("Pods the Deployment (or the autoscaler) asks for.")
    replica_summary: str | None = api("ready/desired, for the printer column.")
    selector: str | None = api("Label selector of the pods (scale subresource).")
    current_revision: str | None = api("Revision (pod template hash) the Deployment runs.")
    desired_revision: str | None = api("Revision rendered from the current spec.")
    last_good_revision: str | None = api("Last revision whose pods all became and stayed Ready.")
    failed_revision: str | None = api("Revision that failed; not retried until the spec changes.")
    failed_reason: str | None = api("Why failedRevision failed (CrashLoopBackOff, ImagePullBackOff, OOMKilled, "
                                    "Unschedulable, FailedCreate, ReadinessTimeout, ...).")
    failed_message: str | None = api("Detail naming the failing pod (or the Deployment's refusal to create pods).")
    rollout: RolloutRecord | None = api(
        "The rollout state machine's persisted record (phase, revisions, timestamps); kept free-form so the state "
        "survives operator upgrades that add fields.", preserve_unknown=True)
    quality_gate: QualityGateStatus | None = api("The quality gate's state and last verdict "
                                                 "(spec.rollout.qualityGate).")
    model_fetch: ModelFetchStatus | None = api("The weights' fetch from S3 while a pod fetches them "
                                               "(spec.model.source.s3); absent otherwise.")
    model: RunningModel | None = api("The weights the Deployment's pods run now (its pod template's), which after a "
                                     "rollback are not the spec's.")
    gpu_utilization: str | None = api("current/target utilisation from the autoscaler, e.g. 45/80.")
    active_schedule: str | None = api("Name of the open autoscaling schedule window, if any.")
    url: str | None = api("In-cluster URL of the service.")
