"""The quality gate's bounds and defaults (spec.rollout.qualityGate), written once.

The operator reads the golden pages from a ConfigMap, sends each one to a new revision's pod and
keeps the outputs of the last good revision in a ConfigMap of its own, so every count and size
here is bounded below what one ConfigMap holds (1 MiB). The OcrService's typed API model takes its
bounds and defaults from here (and so does its CRD); the gate and the server read the same values.
"""

from __future__ import annotations

# Golden pages: at most this many pages (binaryData keys) and bytes in all (the pages, raw).
MAX_GOLDEN_PAGES = 16
MAX_GOLDEN_BYTES = 768 * 1024
# A page's expected text (ground truth, a `<page>.txt` data key) and a recorded output, in characters.
MAX_PAGE_TEXT_CHARS = 16384

# Thresholds on the normalised edit distance (0: the same text, 1: nothing in common).
DEFAULT_MAX_MEAN_DISTANCE = 0.02
DEFAULT_MAX_PAGE_DISTANCE = 0.1

# Each gate request's new-token budget and deadline (each at most spec.inference's own).
DEFAULT_GATE_MAX_NEW_TOKENS = 512
MAX_GATE_MAX_NEW_TOKENS = 2048
DEFAULT_GATE_TIMEOUT_SECONDS = 120
MAX_GATE_TIMEOUT_SECONDS = 600

# Golden pages on the model PVC (goldenPages.pvcPath): a relative path inside the volume, of
# segments that never start with a dot (so no `.`, `..` or hidden folder), at most this long; the
# server lists and serves that folder (ocr_server.serving.golden) within the same page and byte bounds.
MAX_GOLDEN_PATH_CHARS = 256
GOLDEN_PATH_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$"
# A page's file name (a ConfigMap key's characters, no leading dot) and the folder's entries read
# at most (pages, expected texts and anything else): more is GoldenPagesTooLarge.
GOLDEN_NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$"
MAX_GOLDEN_ENTRIES = 4 * MAX_GOLDEN_PAGES
# The server's environment variable naming that folder (the operator sets it in the pods).
GOLDEN_DIR_ENV = "GOLDEN_DIR"
# The quality gate's own key with spec.auth: a file of keys (the operator's gate-key Secret,
# mounted whole so kubelet updates it in place), accepted only on the gate's requests to the pod
# itself: GET /v1/golden[/name] and POST /v1/ocr addressed to the pod's own IP (POD_IP_ENV).
GATE_KEY_FILE_ENV = "GATE_KEY_FILE"
POD_IP_ENV = "POD_IP"
