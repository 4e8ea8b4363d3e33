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
# The worker's pod name (the downward API's metadata.name): each pod attempt of an index writes a
# progress object of its own, so a stale worker (a frozen process resumed, a lost node's pod still
# running after its replacement started) cannot overwrite its successor's report.
POD_NAME_ENV = "BATCH_POD_NAME"
# Exit status: every owned document has an outcome (failed ones in the errors files); a fatal
# error (configuration, the input unlistable, credentials refused, the output unwritable: every
# retry would fail alike: the Job fails the index at once); the storage unavailable past
# limits.storageRetrySeconds (the Job retries the index, counted in backoffLimitPerIndex);
# stopped by SIGTERM (a cancel, a node draining: the index runs again and skips what it
# finished). Any other status (1: an uncaught exception, 137: killed) is a failed pod the Job
# retries: only EXIT_FATAL is failed at once, and it is not a status Python exits with by itself.
EXIT_DONE, EXIT_FATAL, EXIT_STORAGE, EXIT_TERMINATED = 0, 78, 75, 143
# Why a worker ended fatally, when it knows (its report's `fatal_reason`, beside `fatal`, the
# message): the input's check at start (worker.py lists it before anything else; the operator
# never connects to a batch's storage) and the configuration. The operator makes the one a failed
# index reports the reason of the batch's Failed condition; any other value it ignores.
INPUT_NOT_FOUND = "InputNotFound"  # no such directory, bucket or prefix (nothing under it)
INPUT_CREDENTIALS_REJECTED = "InputCredentialsRejected"  # the storage refused the credentials
INPUT_UNREADABLE = "InputUnreadable"  # any other answer that every retry would meet again
INVALID_CONFIGURATION = "InvalidConfiguration"  # e.g. an S3 endpoint or credential value malformed
FATAL_REASONS = frozenset({INPUT_NOT_FOUND, INPUT_CREDENTIALS_REJECTED, INPUT_UNREADABLE, INVALID_CONFIGURATION})
# The documents a worker holds at once are at most this many times limits.maxDocumentBytes in all
# (budget.py): the controller sizes the worker's memory for it.
DOCUMENT_BUDGET = 2
