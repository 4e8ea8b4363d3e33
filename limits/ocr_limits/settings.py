"""The server settings an OcrService sets through its fields: names, config keys, defaults and bounds.

Each setting is the server's: its environment variable (which also names it in the server's error
messages), its key in the server's config file (section.name), its default and its bounds. The
server's dataclass defaults and startup checks read them here, and so does the operator: an
OcrService field that sets a setting names it (ocr_operator.api), and from that one definition come
the CRD's `default`, `minimum`, `maximum` and `enum`, the operator's checks, the config.yaml it
renders (under `key`) and the spec.env names it refuses (an env value would silently override the
field, since the server lets the environment win over its file). `SERVER_SETTINGS` are the server's
own (its queue, its body budget, its TLS handshake bound), with no OcrService field: spec.env
sets them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from .engines import DEFAULT_ENGINE, ENGINES
from .tokens import BASE_SIZE, CROP_SIZE, TOKEN_CEILING, TOKEN_FLOOR, VIEW_SIZES

Scalar = Union[int, str]

DEFAULT_MODEL_NAME = "deepseek-ai/DeepSeek-OCR-2"
DEFAULT_CACHE_DIR = "/models"
DEFAULT_PORT = 8080
# A request admitted just before SIGTERM may run for TIMEOUT_SEC: the server's graceful shutdown
# waits that long plus this margin for its response to be written, and the operator gives the pod
# a terminationGracePeriodSeconds that covers it.
GRACEFUL_SHUTDOWN_MARGIN_SEC = 5


def graceful_shutdown_seconds(timeout_sec: float) -> float:
    """How long the server waits for requests in flight at SIGTERM: TIMEOUT_SEC + 5."""
    return timeout_sec + GRACEFUL_SHUTDOWN_MARGIN_SEC


@dataclass(frozen=True)
class Setting:
    """One server setting an OcrService sets (or, in SERVER_SETTINGS, leaves to spec.env)."""

    env: str | None  # the server's name: its environment variable (MAX_VISUAL_TOKENS); None: file only
    key: str  # its key in the server's configuration file: section.name (model.max_visual_tokens)
    default: Scalar | None = None  # None: no fixed default (set by the engine, or unset)
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[Scalar, ...] = ()
    bounds: str = ""  # what the setting bounds, for the reference table
    follows: str = ""  # a default derived from another setting (default None), for the reference table


SETTINGS: tuple[Setting, ...] = (
    Setting("ENGINE", "runtime.engine", DEFAULT_ENGINE, choices=ENGINES,
            bounds="the inference engine; the image must carry it"),
    Setting("MODEL_NAME", "model.name", DEFAULT_MODEL_NAME, bounds="the weights folder under CACHE_DIR"),
    Setting("CACHE_DIR", "model.cache_dir", DEFAULT_CACHE_DIR, bounds="where the weights cache is mounted"),
    Setting("MODEL_PATH", "model.path", bounds="the weights inside the image, instead of CACHE_DIR/MODEL_NAME"),
    Setting("INPUT_SIZE", "model.input_size", CROP_SIZE, choices=VIEW_SIZES,
            bounds="side of each local crop in px (must be smaller than BASE_SIZE)"),
    Setting("BASE_SIZE", "model.base_size", BASE_SIZE, choices=VIEW_SIZES, bounds="side of the global view in px"),
    Setting("MIN_VISUAL_TOKENS", "model.min_visual_tokens", TOKEN_FLOOR, TOKEN_FLOOR, TOKEN_CEILING,
            bounds="the fewest visual tokens a page is shown with"),
    Setting("MAX_VISUAL_TOKENS", "model.max_visual_tokens", None, TOKEN_FLOOR, TOKEN_CEILING,
            bounds="the most visual tokens a page is shown with"),
    Setting("CONCURRENCY", "runtime.concurrency", 4, 1, 256,
            bounds="requests processed at once per pod (the rest wait in the queue)"),
    Setting("BATCH_SIZE", "runtime.batch_size", 8, 1, 64,
            bounds="pages decoded at once: a generate() batch (DECODER=generate), the slots decoder's "
                   "slots on a CPU (DECODE_SLOTS 0), vLLM's max_num_seqs (ENGINE=vllm)"),
    Setting("DECODE_SLOTS", "runtime.decode_slots", 0, 0, 1024,
            bounds="pages the slots decoder (the transformers engine's default) decodes at once; 0: 64 on a GPU, "
                   "BATCH_SIZE on a CPU"),
    Setting("TIMEOUT_SEC", "runtime.timeout_sec", 30, 1, 3600,
            bounds="the deadline of one request in seconds (later answers are 504)"),
    Setting("MAX_NEW_TOKENS", "runtime.max_new_tokens", 8192, 1, 8192,
            bounds="generated tokens per page (the model's context is 8192)"),
    Setting("PORT", "service.port", DEFAULT_PORT, 1, 65535, bounds="the server's port and the Service's"),
)
# A setting of the server's configuration file only (no environment variable): the weights'
# revision it reports in /health and in results.
MODEL_REVISION = Setting(None, "model.revision", bounds="the weights' revision it reports")
# Server settings with no OcrService field of their own: an OcrService sets them through spec.env.
# The server reads their defaults and bounds from here.
SERVER_SETTINGS: tuple[Setting, ...] = (
    Setting("QUEUE_SIZE", "runtime.queue_size", 64, 1, 4096,
            bounds="requests waiting for an engine slot; one more is answered 429 with Retry-After"),
    Setting("BATCH_QUEUE_THRESHOLD", "runtime.batch_queue_threshold", None, 0, 4096, follows="half of `QUEUE_SIZE`",
            bounds="requests waiting (of both classes) from which a batch request is answered 429 with Retry-After; "
                   "at most QUEUE_SIZE"),
    Setting("BATCH_MAX_RUNNING", "runtime.batch_max_running", None, 1, 4096,
            follows="three quarters of the requests run at once",
            bounds="batch requests (X-Request-Class: batch) run at once; the other slots are kept for interactive "
                   "requests (at most the requests run at once)"),
    Setting("MAX_INFLIGHT_BODY_BYTES", "service.max_inflight_body_bytes", 256 * 1024 * 1024, 1024 * 1024, 64 * 1024 ** 3,
            bounds="request body bytes held at once by all requests, reserved before a body is read; a request "
                   "beyond it is answered 503 with Retry-After (at least the largest body MAX_BODY_BYTES allows)"),
    Setting("TLS_HANDSHAKE_TIMEOUT_SEC", "service.tls_handshake_timeout_sec", 10, 1, 300,
            bounds="seconds a client has to finish its TLS handshake from its connection's accept (counted in "
                   "MAX_CONNECTIONS meanwhile); then the connection is closed"),
)
SETTING = {s.env: s for s in SETTINGS + SERVER_SETTINGS if s.env}


def setting(env: str) -> Setting:
    """The shared setting the server knows as `env` (KeyError for a name not declared here)."""
    return SETTING[env]


def split_keys(text: str) -> list[str]:
    """The keys of an API keys text (API_KEYS, API_KEYS_FILE, an OcrService's spec.auth Secret), in
    order: separated by commas or new lines, blank lines and `#` comment lines skipped. The server
    checks them (reload.parse_keys); an OcrBatch worker sends the first."""
    keys: list[str] = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        keys += [k.strip() for k in line.split(",") if k.strip()]
    return keys


def default_batch_max_running(running: int) -> int:
    """BATCH_MAX_RUNNING when unset, for a server that runs `running` requests at once: all but a
    quarter of them (at least one kept while there are two), so that an interactive request
    arriving during a batch finds a free slot instead of waiting for a batch page to finish."""
    return max(1, running - max(1, running // 4))


def default_batch_queue_threshold(queue_size: int) -> int:
    """BATCH_QUEUE_THRESHOLD when unset: half of QUEUE_SIZE, so batch traffic is shed while the
    other half of the queue still takes interactive requests."""
    return queue_size // 2
