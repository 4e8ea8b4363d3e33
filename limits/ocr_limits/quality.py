"""The quality gate's bounds and defaults (spec.rollout.qualityGate), written once.

The operator reads the golden pages from a ConfigMap, sends each one to a new revision's pod and
keeps the outputs of the last good revision in a ConfigMap of its own, so every count and size
here is bounded below what one ConfigMap holds (1 MiB). The OcrService's typed API model takes its
bounds and defaults from here (and so does its CRD); the gate and the server read the same values.

Shadow pages (qualityGate.shadow): the serving pods copy a sample of live requests to a held pod,
after their own answer is sent, and record only hashes and distances; the bounds below keep that
sample, and what waits in one serving pod, small. The distance of two texts (`page_distance`) is the
one the gate judges golden and shadow pages by, so the operator and the server import it from here.
"""

from __future__ import annotations

from rapidfuzz.distance import Levenshtein

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

# Shadow pages: copies judged per gate attempt, the share of live requests copied, how long the
# serving pods stay armed, the pages also replayed on the serving pod itself (the noise floor), and
# what one serving pod holds waiting to be copied (the rest is dropped, counted).
MAX_SHADOW_PAGES = 256
DEFAULT_SHADOW_MAX_PAGES = 32
DEFAULT_SHADOW_SAMPLE_PERCENT = 10
MIN_SHADOW_SECONDS = 10
MAX_SHADOW_SECONDS = 3600
DEFAULT_SHADOW_SECONDS = 300
MAX_SHADOW_NOISE_PAGES = 8
DEFAULT_SHADOW_NOISE_PAGES = 2
MAX_SHADOW_QUEUE_PAGES = 8
MAX_SHADOW_QUEUE_BYTES = 64 * 1024 * 1024


def bounded_text(text: str) -> str:
    """A recorded (and compared) text: at most MAX_PAGE_TEXT_CHARS characters."""
    return text[:MAX_PAGE_TEXT_CHARS]


def page_distance(a: str, b: str) -> float:
    """The normalised edit distance of two pages' texts, 0..1 (rapidfuzz): the Levenshtein distance
    of the bounded texts divided by the longer one's length, rounded to 4 places (0: the same text,
    two empty ones included; 1: nothing in common)."""
    return round(float(Levenshtein.normalized_distance(bounded_text(a), bounded_text(b))), 4)
