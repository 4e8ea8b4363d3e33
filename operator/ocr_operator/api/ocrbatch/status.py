"""OcrBatchStatus: the batch's progress as the operator aggregates it from the workers' reports (a
model for the CRD's schema; the controller builds it)."""

from __future__ import annotations

from ..conditions import Condition
from ..fields import api, model

PHASES = ("Pending", "Running", "Suspended", "Succeeded", "Failed", "Cancelled")


@model
class PageCounts:
    total: int | None = api("Pages found so far in the documents opened.")
    done: int | None = api("Pages with a result.")
    failed: int | None = api("Pages in the errors files.")


@model
class DocumentCounts:
    total: int | None = api("Documents under the input.")
    done: int | None = api("Documents with a result (some of their pages may have failed).")
    failed: int | None = api("Documents that could not be read at all (corrupt, unsupported, too large).")


@model
class CallbackStatus:
    event: str | None = api("batch.completed, batch.failed or batch.cancelled.")
    id: str | None = api("The Idempotency-Key sent (the batch's uid and the event).")
    state: str | None = api("Delivered: answered 2xx; GaveUp: answered 4xx other than 408/429, retries ran out, or "
                            "the URL's host was refused (the Callback condition's reason says which).",
                            enum=("Delivered", "GaveUp"))
    attempts: int | None = api("POSTs sent.")
    last_status: int | None = api("The HTTP status of the last answer.")
    error: str | None = api("Why it was not delivered.")
    time: str | None = api("When the delivery ended.", format="date-time")


@model
class OcrBatchStatus:
    """Progress of the batch, aggregated by the operator from the workers' progress files."""

    observed_generation: int | None = api("The generation of the spec this status describes.")
    phase: str | None = api("Where the batch is.", enum=PHASES)
    job_name: str | None = api("The Indexed Job running the workers.")
    page_summary: str | None = api("Pages done/total, for the printer column.")
    pages: PageCounts | None = api("Page counts over all workers.")
    documents: DocumentCounts | None = api("Document counts over all workers.")
    pages_per_second: str | None = api("Pages per second over the last progress reports.")
    eta: str | None = api("Estimated time left, e.g. 12m30s.")
    start_time: str | None = api("When the Job started.", format="date-time")
    completion_time: str | None = api("When the batch ended.", format="date-time")
    callback: CallbackStatus | None = api("The completion callback's delivery (sent once; a receiver drops a repeat "
                                          "by its id).")
    conditions: tuple[Condition, ...] = api("Ready (False while the batch waits: ServiceNotFound, ClaimNotFound, "
                                            "SecretNotFound, WorkersNotCreated quoting the API server's refusal of "
                                            "the workers, WorkersUnschedulable quoting the scheduler; and while "
                                            "spec.suspend holds it: Suspended), Complete, "
                                            "Failed and Cancelled conditions, Callback once the "
                                            "completion callback's delivery ended (Delivered, CallbackGaveUp or "
                                            "CallbackRefused), Stalled once a worker was restarted for making no "
                                            "progress for spec.stallSeconds (True: Stalled; False: Recovered), and "
                                            "StorageAvailable once a worker waited out a storage outage (False: "
                                            "StorageUnavailable, naming the index, the store, since when and the "
                                            "last error; True: StorageAvailable once none waits), with the reason "
                                            "in words.", max_items=16,
                                            list_map_keys=("type",))
