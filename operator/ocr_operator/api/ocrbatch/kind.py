"""The OcrBatch kind: names and printer columns; its name bounds the Job and pod names made from it."""

from __future__ import annotations

from ..crd import Column, Kind
from ..fields import Rule
from .batch import OcrBatchSpec
from .status import OcrBatchStatus

MAX_NAME = 52  # the Job's pods are named <batch>-<index>-<5 random characters> within 63

OCRBATCH = Kind(
    kind="OcrBatch",
    plural="ocrbatches",
    singular="ocrbatch",
    short_names=("ocrb",),
    description="OcrBatch sends every page of a set of documents to an OcrService and writes one result per document "
                "(a JSONL file of pages and a Markdown file) and an errors file. It runs as an Indexed Job in its "
                "namespace; a restarted worker skips the documents already done.",
    spec=OcrBatchSpec,
    status=OcrBatchStatus,
    rules=(Rule(f"self.metadata.name.size() <= {MAX_NAME}",
                f"metadata.name of an OcrBatch is at most {MAX_NAME} characters: its Job and the Job's pods are named "
                "after it"),),
    columns=(
        Column("Service", "string", ".spec.service", "The OcrService the pages are sent to."),
        Column("Phase", "string", ".status.phase", "Pending, Running, Suspended, Succeeded, Failed or Cancelled."),
        Column("Pages", "string", ".status.pageSummary", "Pages done/total (the total grows while documents are opened)."),
        Column("Failed", "integer", ".status.pages.failed", "Pages that failed (listed in the errors files)."),
        Column("Age", "date", ".metadata.creationTimestamp"),
        Column("Pages/s", "string", ".status.pagesPerSecond", "Pages per second over the last progress reports.",
               priority=1),
        Column("ETA", "string", ".status.eta", "Estimated time to completion.", priority=1),
        Column("Reason", "string", '.status.conditions[?(@.type=="Ready")].reason',
               "Why the batch is where it is (its Ready condition's reason: WorkersNotCreated, ServiceNotFound, ...).",
               priority=1),
    ),
)
