"""The server settings an OcrService sets through its own fields: names, defaults and bounds.

Each setting has two names: the server's (the environment variable, which also names the key in
its error messages) and the OcrService field the operator renders into the server's config.yaml.
Both sides read the default and the bounds from here: the server's dataclass defaults and startup
checks, the operator's spec defaults, and the CRD's `default`, `minimum`, `maximum` and `enum`
(written by hack/gen-crd.py). Because the operator renders these from the OcrService's fields,
`spec.env` may not set them: an env value would silently override the field (the server lets the
environment win over its file); `FIELD_FOR_ENV` is that list. `SERVER_SETTINGS` are the server's
own (its queue), with no OcrService field: spec.env sets them.
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
    field: str  # the OcrService field, a path under spec (inference.maxVisualTokens); "" for SERVER_SETTINGS
    default: Scalar | None = None  # None: no fixed default (set by the engine, or unset)
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[Scalar, ...] = ()
    bounds: str = ""  # what the setting bounds, for the reference table
    follows: str = ""  # a default derived from another setting (default None), for the reference table
    key: str = ""  # its key in the server's configuration file: section.name (model.max_visual_tokens)

    @property
    def spec_path(self) -> str:
        """The field as users write it in messages: spec.inference.maxVisualTokens."""
        return f"spec.{self.field}"


SETTINGS: tuple[Setting, ...] = (
    Setting("ENGINE", "engine", DEFAULT_ENGINE, choices=ENGINES, key="runtime.engine",
            bounds="the inference engine; the image must carry it"),
    Setting("MODEL_NAME", "model.name", DEFAULT_MODEL_NAME, key="model.name", bounds="the weights folder under CACHE_DIR"),
    Setting("CACHE_DIR", "model.cacheDir", DEFAULT_CACHE_DIR, key="model.cache_dir",
            bounds="where the weights cache is mounted"),
    Setting("MODEL_PATH", "model.path", key="model.path",
            bounds="the weights inside the image, instead of CACHE_DIR/MODEL_NAME"),
    Setting("INPUT_SIZE", "inference.inputSize", CROP_SIZE, choices=VIEW_SIZES, key="model.input_size",
            bounds="side of each local crop in px (must be smaller than BASE_SIZE)"),
    Setting("BASE_SIZE", "inference.baseSize", BASE_SIZE, choices=VIEW_SIZES, key="model.base_size",
            bounds="side of the global view in px"),
    Setting("MIN_VISUAL_TOKENS", "inference.minVisualTokens", TOKEN_FLOOR, TOKEN_FLOOR, TOKEN_CEILING,
            key="model.min_visual_tokens", bounds="the fewest visual tokens a page is shown with"),
    Setting("MAX_VISUAL_TOKENS", "inference.maxVisualTokens", None, TOKEN_FLOOR, TOKEN_CEILING,
            key="model.max_visual_tokens", bounds="the most visual tokens a page is shown with"),
    Setting("CONCURRENCY", "inference.concurrency", 4, 1, 256, key="runtime.concurrency",
            bounds="requests processed at once per pod (the rest wait in the queue)"),
    Setting("BATCH_SIZE", "inference.batchSize", 8, 1, 64, key="runtime.batch_size",
            bounds="pages decoded at once: a generate() batch (DECODER=generate), the slots decoder's "
                   "slots on a CPU (DECODE_SLOTS 0), vLLM's max_num_seqs (ENGINE=vllm)"),
    Setting("DECODE_SLOTS", "inference.decodeSlots", 0, 0, 1024, key="runtime.decode_slots",
            bounds="pages the slots decoder (the transformers engine's default) decodes at once; 0: 64 on a GPU, "
                   "BATCH_SIZE on a CPU"),
    Setting("TIMEOUT_SEC", "inference.timeoutSeconds", 30, 1, 3600, key="runtime.timeout_sec",
            bounds="the deadline of one request in seconds (later answers are 504)"),
    Setting("MAX_NEW_TOKENS", "inference.maxNewTokens", 8192, 1, 8192, key="runtime.max_new_tokens",
            bounds="generated tokens per page (the model's context is 8192)"),
    Setting("PORT", "service.port", DEFAULT_PORT, 1, 65535, key="service.port", bounds="the server's port and the Service's"),
    Setting("TLS_CERT_FILE", "tls.secretName", bounds="HTTPS: the certificate, mounted from the TLS Secret"),
    Setting("TLS_KEY_FILE", "tls.secretName", bounds="HTTPS: the private key, mounted from the TLS Secret"),
    Setting("API_KEYS_FILE", "auth.secretName", bounds="the API keys, mounted from the auth Secret"),
)
# A setting of the server's configuration file only (no environment variable): the weights'
# revision it reports in /health and in results.
MODEL_REVISION = Setting(None, "model.revision", key="model.revision", bounds="the weights' revision it reports")
# Server settings with no OcrService field of their own: an OcrService sets them through spec.env
# (they are not in FIELD_FOR_ENV). The server reads their defaults and bounds from here.
SERVER_SETTINGS: tuple[Setting, ...] = (
    Setting("QUEUE_SIZE", "", 64, 1, 4096, key="runtime.queue_size",
            bounds="requests waiting for an engine slot; one more is answered 429 with Retry-After"),
    Setting("BATCH_QUEUE_THRESHOLD", "", None, 0, 4096, follows="half of `QUEUE_SIZE`", key="runtime.batch_queue_threshold",
            bounds="requests waiting (of both classes) from which a batch request is answered 429 with Retry-After; "
                   "at most QUEUE_SIZE"),
    Setting("BATCH_MAX_RUNNING", "", None, 1, 4096, follows="three quarters of the requests run at once",
            key="runtime.batch_max_running",
            bounds="batch requests (X-Request-Class: batch) run at once; the other slots are kept for interactive "
                   "requests (at most the requests run at once)"),
)
SETTING = {s.env: s for s in SETTINGS + SERVER_SETTINGS}
# Names the operator also owns, besides the settings: the config file it renders from the spec,
# inline keys, which would bypass spec.auth's Secret (the server refuses API_KEYS with API_KEYS_FILE),
# and the quality gate's golden pages folder on the model volume (quality.GOLDEN_DIR_ENV).
OPERATOR_ENV = {"CONFIG_FILE": "spec.engine, spec.model and spec.inference", "API_KEYS": "spec.auth.secretName",
                "GOLDEN_DIR": "spec.rollout.qualityGate.goldenPages.pvcPath"}
# Environment names spec.env may not set -> the OcrService field to set instead.
FIELD_FOR_ENV = {**{s.env: s.spec_path for s in SETTINGS}, **OPERATOR_ENV}


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
