"""The quality gate's bounds and defaults (spec.rollout.qualityGate), written once.

The operator reads the golden pages from a ConfigMap, sends each one to a new revision's pod and
keeps the outputs of the last good revision in a ConfigMap of its own, so every count and size
here is bounded below what one ConfigMap holds (1 MiB). hack/gen-crd.py writes the numeric bounds
and defaults into the CRD; the operator's spec parser and the gate read the same values.
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

# field under spec.rollout.qualityGate -> (default, minimum, maximum), for hack/gen-crd.py.
GATE_FIELDS: dict[str, tuple[float | int, float | int, float | int]] = {
    "maxMeanDistance": (DEFAULT_MAX_MEAN_DISTANCE, 0, 1),
    "maxPageDistance": (DEFAULT_MAX_PAGE_DISTANCE, 0, 1),
    "maxNewTokens": (DEFAULT_GATE_MAX_NEW_TOKENS, 1, MAX_GATE_MAX_NEW_TOKENS),
    "timeoutSeconds": (DEFAULT_GATE_TIMEOUT_SECONDS, 1, MAX_GATE_TIMEOUT_SECONDS),
}
