"""OcrBatchSpec: what an OcrBatch reads, where it writes, and how its Indexed Job of workers runs.

Every input is bounded here, so the API server refuses a batch that asks for more. A field the
worker re-checks in its configuration takes its default and bounds from ocr_limits.batch (`limit=`),
where the worker, which imports nothing of the operator, reads them; the operator reads the typed
values (`parse(OcrBatchSpec, spec)`), never a second default.
"""

from __future__ import annotations

from ocr_limits.batch import batch_setting as bounds
from ocr_limits.prompts import MAX_PROMPT_CHARS

from ..fields import Rule, api, model


def _dir(path: str) -> str:
    return "/" if path == "/" else path + "/"


def _prefix(url: str) -> str:
    return url if url.endswith("/") else url + "/"


@model
class S3Location:
    url: str = api("s3://bucket/prefix/ of the objects.", min_length=6, max_length=1024,
                   pattern="^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", required=True)
    credentials_secret: str = api(
        "Name of a Secret in this namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and optionally "
        "AWS_ENDPOINT_URL (a server other than AWS) and AWS_REGION; the workers read it as environment variables.",
        min_length=1, max_length=253, required=True)


@model
class PvcLocation:
    claim_name: str = api("Name of the PersistentVolumeClaim.", min_length=1, max_length=253, required=True)
    path: str = api(
        "Absolute directory inside the volume, without a trailing slash, . or .. parts (/ is the whole volume).",
        max_length=1024, default="/", pattern="^/([^/]+(/[^/]+)*)?$",
        rules=(Rule("!self.matches('(^|/)[.][.]?(/|$)')",
                    "spec.input.pvc.path and spec.output.pvc.path must not contain . or .. parts",
                    holds=lambda p: not any(part in (".", "..") for part in p.split("/"))),))


@model
class Location:
    s3: S3Location | None = api("An S3 prefix (any S3-compatible server).")
    pvc: PvcLocation | None = api("A directory on a PersistentVolumeClaim in this namespace.")


def _one_location(role: str) -> Rule:
    return Rule("has(self.s3) != has(self.pvc)", f"spec.{role} needs exactly one of spec.{role}.s3 or spec.{role}.pvc",
                holds=lambda loc: (loc.s3 is None) != (loc.pvc is None))


@model
class Options:
    __rules__ = (Rule("!(has(self.mode) && has(self.prompt))",
                      "spec.options.mode and spec.options.prompt are mutually exclusive: a prompt replaces the mode's",
                      ".prompt", lambda o: o.mode is None or o.prompt is None),)

    mode: str | None = api("markdown: Markdown with layout blocks (the default of the server); free: plain text.",
                           limit=bounds("options.mode"))
    prompt: str | None = api('The model\'s instruction instead of the mode\'s, e.g. "Parse the figure."; the server '
                             'checks its tokens.', min_length=1, max_length=MAX_PROMPT_CHARS)
    max_new_tokens: int | None = api("New-token budget per page; unset, the OcrService's spec.inference.maxNewTokens.",
                                     limit=bounds("options.maxNewTokens"))


@model
class SecretKeyRef:
    name: str = api("Name of a Secret in this namespace.", min_length=1, max_length=253, required=True)
    key: str = api("Key of the HMAC key in the Secret.", min_length=1, max_length=253, default="secret")


@model
class Callback:
    url: str = api("http(s) URL of the receiver.", max_length=2048, pattern=r"^https?://[^\s/$.?#][^\s]*$",
                   required=True)
    secret_ref: SecretKeyRef | None = api("The Secret key holding the HMAC key; without it the callback is not signed.")


@model
class Limits:
    max_document_bytes: int = api(
        "Largest document in bytes; larger ones are not read. A worker holds at most twice this in documents at once, "
        "whatever concurrencyPerWorker.", limit=bounds("limits.maxDocumentBytes"))
    max_pages_per_document: int = api("Most pages of one document (lines of a JSONL batch file).",
                                      limit=bounds("limits.maxPagesPerDocument"))
    max_documents: int = api("Most files under the input; the batch fails without starting when there are more.",
                             limit=bounds("limits.maxDocuments"))
    storage_retry_seconds: int = api(
        "Longest storage outage (S3 5xx, throttling, timeouts, resets; a full or failing volume) a worker waits out, "
        "retrying with backoff; past it the worker's pod fails and the Job retries the index.",
        limit=bounds("limits.storageRetrySeconds"))


def _no_pvc_overlap(s: "OcrBatchSpec") -> bool:
    i, o = s.input.pvc, s.output.pvc
    if i is None or o is None or i.claim_name != o.claim_name:
        return True
    return not (_dir(o.path).startswith(_dir(i.path)) or _dir(i.path).startswith(_dir(o.path)))


def _no_s3_overlap(s: "OcrBatchSpec") -> bool:
    i, o = s.input.s3, s.output.s3
    if i is None or o is None:
        return True
    return not (_prefix(o.url).startswith(_prefix(i.url)) or _prefix(i.url).startswith(_prefix(o.url)))


PVC_DIR = "({0}.pvc.path == '/' ? '/' : {0}.pvc.path + '/')"
S3_PREFIX = "({0}.s3.url.endsWith('/') ? {0}.s3.url : {0}.s3.url + '/')"


def _overlap(template: str) -> str:
    i, o = template.format("self.input"), template.format("self.output")
    return f"{o}.startsWith{i} || {i}.startsWith{o}"


@model
class OcrBatchSpec:
    """What to read, where to write, and how to run the batch."""

    __rules__ = (
        Rule("!(has(self.input.pvc) && has(self.output.pvc) && self.input.pvc.claimName == self.output.pvc.claimName "
             f"&& ({_overlap(PVC_DIR)}))",
             "spec.output.pvc.path and spec.input.pvc.path must not contain one another on the same claim: results "
             "written inside the input would be read as input", ".output.pvc.path", _no_pvc_overlap),
        Rule(f"!(has(self.input.s3) && has(self.output.s3) && ({_overlap(S3_PREFIX)}))",
             "spec.output.s3.url and spec.input.s3.url must not contain one another: results written inside the "
             "input would be read as input", ".output.s3.url", _no_s3_overlap),
        # Transition rules (oldSelf): only the API server sees the object's previous version.
        Rule("oldSelf.service == self.service && oldSelf.input == self.input && oldSelf.output == self.output && "
             "(has(oldSelf.options) == has(self.options) && (!has(self.options) || oldSelf.options == self.options))",
             "spec.service, spec.input, spec.output and spec.options are immutable: create a new OcrBatch for other "
             "documents or settings", ".service"),
        Rule("oldSelf.parallelism == self.parallelism && oldSelf.concurrencyPerWorker == self.concurrencyPerWorker && "
             "oldSelf.limits == self.limits && has(oldSelf.deadlineSeconds) == has(self.deadlineSeconds) && "
             "(!has(self.deadlineSeconds) || oldSelf.deadlineSeconds == self.deadlineSeconds)",
             "spec.parallelism, spec.concurrencyPerWorker, spec.deadlineSeconds and spec.limits are fixed when the "
             "batch is created: its Job and its workers' settings are made once, and each worker owns a fixed shard "
             "of the documents (create a new OcrBatch to run them otherwise; finished documents are skipped)",
             ".parallelism"),
        Rule("!has(oldSelf.cancel) || !oldSelf.cancel || (has(self.cancel) && self.cancel)",
             "spec.cancel cannot be undone: a cancelled batch stays cancelled (create a new OcrBatch to resume; "
             "finished documents are skipped)", ".cancel"),
    )

    service: str = api("Name of the OcrService in this namespace whose Service receives the pages.", min_length=1,
                       max_length=63, pattern="^[a-z]([-a-z0-9]*[a-z0-9])?$", required=True)
    input: Location = api(
        "Where the documents are: exactly one of s3 or pvc. Every file under it is one document: PDF, PNG, JPEG, TIFF, "
        "WebP, GIF or BMP by its content, or, named *.jsonl, an OpenAI batch file of /v1/chat/completions requests. Other "
        "files go to the errors file.", required=True, rules=(_one_location("input"),))
    output: Location = api(
        "Where the results go: exactly one of s3 or pvc, outside the input. results/ holds a JSONL and a Markdown "
        "file per document (named by the document and its content hash), errors/ one JSONL object per failed "
        "document, progress/ one small file per pod of each index.", required=True, rules=(_one_location("output"),))
    options: Options | None = api("How each page is read (the server's /v1/ocr options), the same for every "
                                  "document.")
    parallelism: int = api("Worker pods (Job indices); each owns a fixed shard of the documents.",
                           limit=bounds("parallelism"))
    concurrency_per_worker: int = api("Pages each worker has in flight at once.", limit=bounds("concurrencyPerWorker"))
    callback: Callback | None = api(
        "A URL that gets a POST when the batch ends (events batch.completed, batch.failed, batch.cancelled), signed "
        "with HMAC-SHA256, retried with backoff on 408, 429 and 5xx.")
    cancel: bool = api("true stops the workers and ends the batch as Cancelled, keeping the results written so far. "
                       "Deleting the OcrBatch cancels it too.", default=False)
    suspend: bool = api(
        "true stops the workers (each releases the documents it holds and writes its progress; a stop counts against "
        "no index's retries) and holds the batch Suspended with the results written so far; false runs them again, "
        "skipping every finished document. An OcrBatch created suspended makes its Job without pods: a batch queued "
        "for later. spec.deadlineSeconds counts running time from the last resume (the Job's activeDeadlineSeconds). "
        "spec.cancel ends a suspended batch like a running one.", default=False)
    deadline_seconds: int | None = api("The batch fails when it runs longer than this (the Job's "
                                       "activeDeadlineSeconds); unset, no deadline.", limit=bounds("deadlineSeconds"))
    ttl_seconds_after_finished: int | None = api(
        "The OcrBatch is deleted this many seconds after it ended (Succeeded, Failed or Cancelled) and its callback's "
        "delivery ended, and with it its Job, workers' pods and ConfigMap (the results stay in the output), as a Job's "
        "ttlSecondsAfterFinished does; 0: as soon as it ended. Unset: kept until deleted.",
        limit=bounds("ttlSecondsAfterFinished"))
    stall_seconds: int = api(
        "A running worker whose progress (pages and documents finished, retries, the failed tries of a storage "
        "outage it waits out) has not moved for this long is stalled: a frozen process, a lost node, a hung volume. "
        "Its pod is deleted, with a Stalled condition and a Warning event, and the Job runs its index again (one of "
        "the index's retries). Keep it above the longest a worker may go without finishing a page or a document: a "
        "slow page's answer. A storage outage is bounded by spec.limits.storageRetrySeconds instead.",
        limit=bounds("stallSeconds"))
    limits: Limits = api("Bounds on each document; a document past them is an item of the errors file and the batch "
                         "goes on.", default={})
