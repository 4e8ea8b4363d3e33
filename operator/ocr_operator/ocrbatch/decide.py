"""The OcrBatch controller's decisions (pure): what stops a batch from starting, where it is from its
Job and its workers' progress, when to cancel, which callback to send, and the status to write.

The I/O is in ocrbatch/controller.py; everything here takes plain dicts and returns values, so each
rule is tested alone (tests/unit/batch/test_decide.py).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ocr_limits.timestamps import parse as parse_time
from ocr_batch_worker.contract import FATAL_REASONS, PROGRESS_PREFIX
from ocr_batch_worker.progress import Summary, duration
from ocr_operator.runtime.plan import controlled_by
from ocr_operator.spec import Auth

from .waiting import Waiting

TLS_CERT_KEY, CA_KEY = "tls.crt", "ca.crt"
CALLBACK_FIELD = "spec.callback.secretRef"
MIN_KEY_BYTES = 32  # HMAC-SHA256's own output size: a shorter callback key is a guessable one

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED = "Pending", "Running", "Succeeded", "Failed", "Cancelled"
SUSPENDED = "Suspended"  # spec.suspend: the Job suspended, no worker running; not an end
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
EVENTS = {SUCCEEDED: "batch.completed", FAILED: "batch.failed", CANCELLED: "batch.cancelled"}
# The terminal condition of each end (the CRD's Complete, Failed and Cancelled conditions).
END_CONDITION = {SUCCEEDED: "Complete", FAILED: "Failed", CANCELLED: "Cancelled"}
CALLBACK = "Callback"  # the condition of the completion callback's delivery (callback_condition)


@dataclass(frozen=True)
class Missing:
    """Something the batch needs that is not there: a condition reason and its message."""

    reason: str
    message: str


@dataclass(frozen=True)
class Found:
    """What the preflight looked up (None: absent). Nothing of a batch's storage: the operator
    never connects to it; the workers check their input at start (contract.FATAL_REASONS)."""

    service: Mapping[str, Any] | None
    service_endpoint: Mapping[str, Any] | None  # the OcrService's Service
    claims: Mapping[str, bool]  # claimName -> exists
    secrets: Mapping[str, Mapping[str, Any] | None]  # name -> its data (None: absent)


def needed_claims(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(field, claimName) of every PVC the batch mounts."""
    return [(f"spec.{role}.pvc.claimName", spec[role]["pvc"]["claimName"])
            for role in ("input", "output") if "pvc" in spec[role]]


def service_auth(service: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(Secret, key) of the API keys the OcrService's pods require (its spec.auth), or None: the
    workers send the first key of that Secret, as a client of the OcrService would."""
    auth = ((service or {}).get("spec") or {}).get("auth") or {}
    return (auth["secretName"], auth.get("key") or Auth.key) if auth.get("secretName") else None


def service_tls(service: Mapping[str, Any] | None) -> str | None:
    """The Secret of the certificate the OcrService's pods serve HTTPS with (its spec.tls), or None."""
    return (((service or {}).get("spec") or {}).get("tls") or {}).get("secretName") or None


def trust_key(data: Mapping[str, Any]) -> str:
    """The key of a TLS Secret the workers trust: the issuing CA (ca.crt, as cert-manager writes it)
    when the Secret has one, else the certificate itself (a self-signed one is its own CA)."""
    return CA_KEY if CA_KEY in data else TLS_CERT_KEY


def server_name(service: str, namespace: str) -> str:
    """The name the OcrService's certificate must carry: its Service's cluster DNS name."""
    return f"{service}.{namespace}.svc"


def needed_secrets(spec: Mapping[str, Any], service: Mapping[str, Any] | None = None) -> list[tuple[str, str, tuple[str, ...]]]:
    """(field, Secret name, keys it must hold) of every Secret the batch reads: its own (S3
    credentials, the callback's key) and those of the OcrService it sends to (its API keys, the
    certificate the workers trust)."""
    out = [(f"spec.{role}.s3.credentialsSecret", spec[role]["s3"]["credentialsSecret"],
            ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")) for role in ("input", "output") if "s3" in spec[role]]
    ref = (spec.get("callback") or {}).get("secretRef")
    if ref:
        out.append((CALLBACK_FIELD, ref["name"], (ref.get("key") or "secret",)))
    auth, tls = service_auth(service), service_tls(service)
    if auth:
        out.append((f"spec.service (OcrService {spec['service']}, its spec.auth)", auth[0], (auth[1],)))
    if tls:
        out.append((f"spec.service (OcrService {spec['service']}, its spec.tls)", tls, (TLS_CERT_KEY,)))
    return out


def preflight(spec: Mapping[str, Any], found: Found) -> Missing | None:
    """The first thing missing before a Job may start, naming the field and the object; None: go."""
    name = spec["service"]
    if found.service is None:
        return Missing("ServiceNotFound", f"spec.service: OcrService {name} does not exist in this namespace")
    if found.service_endpoint is None or not (found.service_endpoint.get("spec") or {}).get("clusterIP"):
        return Missing("ServiceNotFound", f"spec.service: the Service of OcrService {name} does not exist yet")
    for field, claim in needed_claims(spec):
        if not found.claims.get(claim):
            return Missing("ClaimNotFound", f"{field}: PersistentVolumeClaim {claim} does not exist in this namespace")
    for field, secret, keys in needed_secrets(spec, found.service):
        data = found.secrets.get(secret)
        if data is None or any(k not in data for k in keys):
            # One message whether the Secret is absent or lacks a key, naming every key the field
            # needs: a batch's creator learns nothing of what a Secret holds (they may not read it).
            return Missing("SecretNotFound", f"{field}: Secret {secret} does not exist in this namespace or lacks "
                                             f"a key this field needs ({', '.join(keys)})")
        if field == CALLBACK_FIELD and (problem := key_problem(_decoded(data[keys[0]]))):
            return Missing("CallbackKeyTooShort", f"{field}: {problem}; the callback is not sent with a shorter one")
    return None


def _decoded(value: Any) -> bytes:
    """A Secret's data value (base64) as bytes; b"" when it is not base64."""
    try:
        return base64.b64decode(str(value), validate=True)
    except ValueError:
        return b""


def service_url(endpoint: Mapping[str, Any], https: bool = False) -> str:
    """The OcrService's Service by its cluster IP: stable for the Service's life, and no cluster DNS
    needed (over HTTPS the certificate is checked against server_name())."""
    spec = endpoint["spec"]
    ip = spec["clusterIP"]
    host = f"[{ip}]" if ":" in ip else ip
    return f"{'https' if https else 'http'}://{host}:{spec['ports'][0]['port']}"


def owned(obj: Mapping[str, Any], batch: Mapping[str, Any]) -> bool:
    """Whether `obj` (the Job of the batch's name) is this batch's: its controller ownerReference
    names the batch's uid. A Job of someone else's (whatever ownerReferences it lists besides), or
    of a deleted batch of the same name still being collected, is never taken for it."""
    uid = batch["metadata"].get("uid")
    return bool(uid) and controlled_by(obj, uid)


def batch_job(found: Mapping[str, Any] | None, batch: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The batch's Job among what the Job name holds: `found` when the batch controls it, else
    None. A decoy Job of that name must never end the batch or feed its progress; the apply
    reports it as a JobConflict."""
    return found if found is not None and owned(found, batch) else None


def job_pods(pods: Iterable[Mapping[str, Any]], job: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    """The pods of the batch's Job among those carrying the batch's label: only a pod whose
    controller ownerReference is that Job's uid. The label alone is anyone's to set, and a decoy
    pod's log or termination message would otherwise be read as a worker's progress."""
    uid = ((job or {}).get("metadata") or {}).get("uid")
    return [pod for pod in pods if uid and controlled_by(pod, uid)] if job is not None else []


def conflict(kind: str, name: str) -> Missing:
    """The batch's Job or ConfigMap name is taken by an object that is not this batch's."""
    return Missing(f"{kind}Conflict", f"metadata.name: a {kind} named {name} exists in this namespace and is not "
                                      "this OcrBatch's (another owner's, or a deleted batch's still being removed)")


def job_conflict(name: str) -> Missing:
    return conflict("Job", name)


def cancel_requested(batch: Mapping[str, Any]) -> bool:
    return bool((batch.get("spec") or {}).get("cancel"))


def job_condition(job: Mapping[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    for cond in ((job or {}).get("status") or {}).get("conditions") or ():
        if cond.get("type") == type_ and cond.get("status") == "True":
            return cond
    return None


@dataclass(frozen=True)
class Phase:
    phase: str
    reason: str
    message: str
    ready: bool = True  # the Ready condition's status while the batch has not ended


def phase_of(job: Mapping[str, Any] | None, summary: Summary | None, missing: Waiting | None = None,
             suspended: bool = False) -> Phase:
    """Where a started batch is, from its Job's conditions (the Job controller's verdict) and, for a
    failure, the workers' first fatal error, with its reason when the worker gave one (e.g.
    InputNotFound: contract.FATAL_REASONS) in place of the Job's. `missing`: why workers are not
    all there (waiting.py): the batch is Pending for it (Ready False) until a worker is ready or one
    has finished, and Running says it beside its counts. `suspended`: spec.suspend, which holds an
    unfinished batch Suspended (Ready False) whatever its workers are doing as they stop."""
    if job is None:
        return Phase(PENDING, "JobCreating", "the workers' Job is being created")
    fatal = summary.fatal if summary else None
    if (done := job_condition(job, "Complete")) is not None:
        return Phase(SUCCEEDED, "Completed", _counts(summary) or done.get("message") or "every index finished")
    if (failed := job_condition(job, "Failed")) is not None:
        why = summary.fatal_reason if summary else None  # a failed index's own reason (its input's check)
        reason = why if isinstance(why, str) and why in FATAL_REASONS else failed.get("reason") or "JobFailed"
        said = failed.get("message") or reason
        return Phase(FAILED, reason, f"{said}: {fatal}" if fatal else said)
    st = job.get("status") or {}
    if suspended:
        stopping = int(st.get("active") or 0) + int(st.get("terminating") or 0)
        said = f"spec.suspend: {f'{stopping} worker(s) stopping' if stopping else 'no worker running'}"
        counts = _counts(summary)
        return Phase(SUSPENDED, SUSPENDED, f"{said}; {counts}" if counts else said, ready=False)
    if st.get("succeeded") or st.get("failed") or st.get("ready") or (st.get("active") and missing is None):
        said = _counts(summary) or f"{st.get('active', 0)} worker(s) running"
        return Phase(RUNNING, "Running", f"{said}; {missing.message}" if missing else said)
    if missing is not None:
        return Phase(PENDING, missing.reason, missing.message, ready=False)
    return Phase(PENDING, "WorkersStarting", "the workers' pods are starting")


def suspend_change(want: bool, job: Mapping[str, Any]) -> bool | None:
    """The Job's spec.suspend to write for the batch's `want` (its spec.suspend), or None when they
    agree. Level-triggered, as JobSet suspends its Jobs: a Job's suspend changed by hand is set back."""
    return None if bool((job.get("spec") or {}).get("suspend")) == want else want


def _counts(summary: Summary | None) -> str:
    if summary is None:
        return ""
    return (f"{summary.pages_done} pages done, {summary.pages_failed} failed, of {summary.pages_total} found in "
            f"{summary.documents_done + summary.documents_failed}/{summary.documents_total} documents")


def report_from_log(text: str) -> dict[str, Any] | None:
    """The last `{"progress": {...}}` line of a worker's log (its stdout), or None."""
    for line in reversed(text.splitlines()):
        if line.startswith(PROGRESS_PREFIX):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("progress"), dict):
                return doc["progress"]
    return None


def report_from_message(message: str | None) -> dict[str, Any] | None:
    """A finished worker's termination message: its last progress report (JSON), or None."""
    if not message:
        return None
    try:
        doc = json.loads(message)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and "index" in doc else None


def pod_index(pod: Mapping[str, Any]) -> int | None:
    md = pod.get("metadata") or {}
    value = (md.get("labels") or {}).get("batch.kubernetes.io/job-completion-index") or \
        (md.get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None and str(value).isdigit() else None


def terminated(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for cs in ((pod.get("status") or {}).get("containerStatuses") or ()):
        if (cs.get("state") or {}).get("terminated") is not None:
            return cs["state"]["terminated"]
    return None


def running(pod: Mapping[str, Any]) -> bool:
    return any((cs.get("state") or {}).get("running") is not None for cs in ((pod.get("status") or {}).get("containerStatuses") or ()))


def latest_per_index(pods: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    """The newest pod of each index (a retried index has several; the newest knows most)."""
    out: dict[int, Mapping[str, Any]] = {}
    for pod in pods:
        index = pod_index(pod)
        if index is None:
            continue
        stamp = (pod.get("metadata") or {}).get("creationTimestamp") or ""
        if index not in out or stamp >= ((out[index].get("metadata") or {}).get("creationTimestamp") or ""):
            out[index] = pod
    return out


def callback_due(batch: Mapping[str, Any], phase: str) -> str | None:
    """The event to send now: the batch ended, it has a callback, and none was delivered or given up on."""
    if phase not in TERMINAL or not (batch.get("spec") or {}).get("callback"):
        return None
    sent = ((batch.get("status") or {}).get("callback") or {})
    if sent.get("event") == EVENTS[phase] and sent.get("state") in ("Delivered", "GaveUp"):
        return None
    return EVENTS[phase]


def expires_in(batch: Mapping[str, Any], now: dt.datetime) -> float | None:
    """Seconds until an ended batch is to be deleted (<= 0: now) by spec.ttlSecondsAfterFinished, or
    None: no TTL, not ended, or a callback still to deliver (the batch's status records it)."""
    ttl = (batch.get("spec") or {}).get("ttlSecondsAfterFinished")
    st = batch.get("status") or {}
    ended = parse_time(st.get("completionTime"))
    if ttl is None or ended is None or st.get("phase") not in TERMINAL or callback_due(batch, st["phase"]):
        return None
    return ttl - (now - ended).total_seconds()


DELETED_MESSAGE = "the OcrBatch was deleted: its workers were stopped; the results written so far are kept"


def callback_on_delete(batch: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The event to send for a batch that is gone, and the status to report: a batch deleted before it
    ended was cancelled (batch.cancelled); one that had ended owes its own event if that was not yet
    delivered or given up on; nothing without a callback."""
    st = dict(batch.get("status") or {})
    phase = st.get("phase")
    if phase in TERMINAL:
        event = callback_due(batch, phase)
        return (event, st) if event is not None else None
    if not (batch.get("spec") or {}).get("callback"):
        return None
    conditions = [{"type": END_CONDITION[CANCELLED], "status": "True", "reason": "Deleted", "message": DELETED_MESSAGE}]
    return EVENTS[CANCELLED], {**st, "phase": CANCELLED, "conditions": conditions}


def progress_status(summary: Summary, moving: bool = True) -> dict[str, Any]:
    """The status fields of the progress (written at most once per progress interval). Not
    `moving` (suspended, or ended): no rate and no ETA, whatever the workers' last reports said."""
    return {
        "pageSummary": summary.page_summary,
        "pages": {"total": summary.pages_total, "done": summary.pages_done, "failed": summary.pages_failed},
        "documents": {"total": summary.documents_total, "done": summary.documents_done,
                      "failed": summary.documents_failed},
        "pagesPerSecond": f"{summary.pages_per_second if moving else 0:.2f}",
        "eta": duration(summary.eta_seconds if moving else None),
    }


def key_problem(key: bytes) -> str | None:
    """Why `key` cannot sign callbacks, or None. The message says nothing of the key but its rule."""
    if len(key) < MIN_KEY_BYTES:
        return f"the HMAC key must be at least {MIN_KEY_BYTES} bytes (e.g. `openssl rand -hex 32`)"
    return None


def callback_condition(state: str, attempts: int, status: int | None, error: str,
                       refused: bool) -> tuple[str, str, str]:
    """(status, reason, message) of the Callback condition once a delivery (callback.Outcome's
    fields) ended: Delivered, or why not; CallbackRefused when the egress guard refused the URL's
    host (nothing was sent)."""
    if state == "Delivered":
        return "True", "Delivered", f"answered {status} after {attempts} attempt(s)"
    return "False", "CallbackRefused" if refused else "CallbackGaveUp", error or f"answered {status}"
