"""What the OcrBatch controller and its workers agree on: how a worker is started and configured,
how it reports, and what its exit status means. The controller renders the Job from these
(ocr_operator/ocrbatch/render.py) and the worker implements them; neither reads the other's
code for them.
"""

from __future__ import annotations

# The worker is this package run as a module in the operator's image.
COMMAND = ("python", "-m", "ocr_batch_worker")
# The configuration (config.py): a JSON file the Job mounts from a ConfigMap, named by this
# variable (or the JSON itself in CONFIG_INLINE_ENV); the index is the Job's completion index.
CONFIG_FILE_ENV = "BATCH_CONFIG_FILE"
CONFIG_INLINE_ENV = "BATCH_CONFIG"
INDEX_ENV = "JOB_COMPLETION_INDEX"
# Each progress report is one line on stdout: PROGRESS_PREFIX + the report's JSON + "}"; the
# controller reads the last one from a running pod's log.
PROGRESS_PREFIX = '{"progress": '
# A finished worker's last report is its container's termination message (Kubernetes' default path).
TERMINATION_LOG = "/dev/termination-log"
# Exit status: every owned document has an outcome (failed ones in the errors files); a fatal
# error (configuration, the input unlistable, credentials refused, the output unwritable: every
# retry would fail alike: the Job fails the index at once); the storage unavailable past
# limits.storageRetrySeconds (the Job retries the index, counted in backoffLimitPerIndex);
# stopped by SIGTERM (a cancel, a node draining: the index runs again and skips what it
# finished). Any other status (1: an uncaught exception, 137: killed) is a failed pod the Job
# retries: only EXIT_FATAL is failed at once, and it is not a status Python exits with by itself.
EXIT_DONE, EXIT_FATAL, EXIT_STORAGE, EXIT_TERMINATED = 0, 78, 75, 143
# The documents a worker holds at once are at most this many times limits.maxDocumentBytes in all
# (budget.py): the controller sizes the worker's memory for it.
DOCUMENT_BUDGET = 2
