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
# Exit status: every owned document has an outcome; a fatal error (configuration, the input
# unreadable, credentials refused: every retry would fail alike); stopped by SIGTERM (a cancel,
# a node draining: the index runs again and skips what it finished).
EXIT_DONE, EXIT_FATAL, EXIT_TERMINATED = 0, 1, 143
# The documents a worker holds at once are at most this many times limits.maxDocumentBytes in all
# (budget.py): the controller sizes the worker's memory for it.
DOCUMENT_BUDGET = 2
