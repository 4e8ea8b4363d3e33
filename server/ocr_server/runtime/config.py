"""Server configuration: YAML sections `service`, `model`, `runtime`, then environment overrides.

Everything is validated once, at construction; a bad value raises ConfigError naming the key, the
value and what is allowed, and `python -m ocr_server` exits with that message. Checks that need the
model's own config (query embedding sizes) live in `validate_against_model`, run right after the
config.json is read and before any weight is loaded.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from .cpus import default_preprocess_workers
from .cpus import usable as usable_cpus
from .credentials import ReloadError, load_keys
from .timeouts import default_liveness_stall_seconds

# The visual-token arithmetic (global view 256 + 144 per crop, 0 or 2..6 crops: 256..1120), the
# engines, and the defaults and bounds shared with the operator are written once, in ocr_limits;
# the server's modules import the names from here.
from ocr_limits import (
    CROP_TOKENS,
    DEFAULT_ENGINE,
    DEFAULT_MODEL_NAME,
    ENGINES,
    EngineLimits,
    GLOBAL_TOKENS,
    MAX_CROPS,
    MIN_CROPS,
    SERVER_SETTINGS,
    SETTINGS,
    TOKEN_CEILING,
    TOKEN_FLOOR,
    TOKEN_STEPS,
    TOKEN_STRIDE,
    crops_allowed,
    crops_required,
    default_batch_queue_threshold,
    default_max_visual_tokens,
    engine_limits,
    setting,
    token_budget_fits,
)


def _default(env: str) -> Any:
    """A setting's default from the shared table (ocr_limits.SETTINGS)."""
    return setting(env).default


def _bounds(env: str) -> tuple[int, int]:
    s = setting(env)
    return s.minimum, s.maximum


MAX_LIVENESS_STALL_SEC = 86_400
DECODERS = ("auto", "slots", "generate")
EXPERTS = ("auto", "grouped_mm", "batched_mm", "eager")
PREPROCESS_MODES = ("threads", "processes")
DTYPES = ("auto", "float32", "bfloat16")
MAX_BODY_TIMEOUT_SEC = 3600
MAX_HEADER_TIMEOUT_SEC = 300
MAX_CONNECTIONS = 65536


def largest_body_bytes(max_body_bytes: int) -> int:
    """The largest request body MAX_BODY_BYTES lets in: a JSON body carries the document in base64
    (4/3 of it) plus up to 64 KiB of other fields (http/routes.py, http/openai_routes.py)."""
    return max_body_bytes * 4 // 3 + 64 * 1024


def resolve_dtype(setting: str, device_type: str) -> str:
    """DTYPE=auto: bfloat16 on a GPU (the checkpoint's own precision), float32 on a CPU, so that
    the two engines and the tests' references give the same tokens there. bfloat16 on a CPU is
    what vLLM's own server picks on one with AVX512-BF16 (`--dtype auto`): faster, other tokens."""
    if setting != "auto":
        return setting
    return "bfloat16" if device_type == "cuda" else "float32"


class ConfigError(ValueError):
    """A configuration value the server cannot run with; the message names the key."""


@dataclass(frozen=True)
class ServiceConfig:
    host: str = "0.0.0.0"
    port: int = _default("PORT")
    api_keys: tuple[str, ...] = ()
    # The keys in a file instead (a mounted Secret), re-read when it changes (credentials.py).
    api_keys_file: str | None = None
    max_body_bytes: int = 20 * 1024 * 1024
    # The most seconds a request's body may take to arrive, headers excluded; then 408. uvicorn
    # bounds no body in time, so a client sending a byte a second would hold a connection forever.
    body_timeout_sec: float = 60.0
    # The most seconds a request line and headers may take to arrive, from the connection's first
    # byte (or its opening); then 408 and the connection closes. uvicorn bounds no head in time:
    # a client sending a header byte a second would hold a connection and its buffer forever.
    header_timeout_sec: float = 30.0
    # Open connections at most; one past it is closed at once, unread (http/connections.py). With the head
    # timeout this bounds what idle or slow connections hold: at most 64 KiB of head each.
    max_connections: int = 1024
    # Body bytes all requests hold at once, reserved before a body is read (http/budget.py); past it
    # a 503, unread: N connections cannot make the server buffer N x MAX_BODY_BYTES.
    max_inflight_body_bytes: int = _default("MAX_INFLIGHT_BODY_BYTES")
    # With TLS: seconds from a connection's accept to its handshake's end (http/tls.py), counted in MAX_CONNECTIONS.
    tls_handshake_timeout_sec: float = float(_default("TLS_HANDSHAKE_TIMEOUT_SEC"))
    max_pages: int = 8
    pdf_dpi: int = 144
    max_image_pixels: int = 64_000_000
    cache_entries: int = 256
    cache_max_bytes: int = 64 * 1024 * 1024  # the result cache's size, counted as its responses' JSON
    log_level: str = "info"
    revision: str = ""  # OCR_REVISION: the operator's pod revision, the revision label of ocr_page_outcomes_total
    # HTTPS when both are set (the operator mounts spec.tls's Secret and sets them).
    tls_cert_file: str | None = None
    tls_key_file: str | None = None


@dataclass(frozen=True)
class ModelConfig:
    name: str = DEFAULT_MODEL_NAME
    path: str | None = None
    cache_dir: str = _default("CACHE_DIR")
    input_size: int = _default("INPUT_SIZE")
    base_size: int = _default("BASE_SIZE")
    # None: the engine's own cap (ocr_limits.default_max_visual_tokens: 1024, or 1120 with vLLM),
    # filled in by ServerConfig, so that ENGINE=vllm alone starts.
    max_visual_tokens: int | None = None
    min_visual_tokens: int = _default("MIN_VISUAL_TOKENS")
    revision: str | None = None
    # true: a missing or empty checksum list (checksums.py) stops start-up instead of a warning.
    require_checksums: bool = False

    @property
    def model_dir(self) -> Path:
        """MODEL_PATH when set, else CACHE_DIR/<MODEL_NAME>."""
        return Path(self.path) if self.path else Path(self.cache_dir) / self.name


@dataclass(frozen=True)
class RuntimeConfig:
    # transformers: static batches around transformers' generate (engines/transformers); vllm: vLLM's async
    # engine in-process with continuous batching (engines/vllm; needs the .venv-vllm environment).
    engine: str = DEFAULT_ENGINE
    gpu_id: int = 0
    device: str = "auto"  # auto | cpu | cuda
    concurrency: int = _default("CONCURRENCY")
    batch_size: int = _default("BATCH_SIZE")
    batch_wait_ms: int = 10
    queue_size: int = _default("QUEUE_SIZE")
    # Requests waiting from which a batch request (X-Request-Class: batch) is shed with 429 while
    # interactive ones still queue up to QUEUE_SIZE. None: half of QUEUE_SIZE, filled in by ServerConfig.
    batch_queue_threshold: int | None = None
    # Batch requests run at once; the other slots are kept for interactive requests. None: three
    # quarters of the requests the server runs at once (ocr_limits.default_batch_max_running),
    # filled in by the service once its runner's size is known.
    batch_max_running: int | None = None
    timeout_sec: float = float(_default("TIMEOUT_SEC"))
    max_new_tokens: int = _default("MAX_NEW_TOKENS")
    ngram_size: int = 20
    ngram_window: int = 90
    # None: one thread per CPU this process may use, 2 to 8 (cpus.py), filled in by ServerConfig.
    preprocess_workers: int | None = None
    # threads | processes: where the transformers engine prepares pages (prepare_pool.py).
    preprocess_mode: str = "threads"
    load_delay_sec: float = 0.0  # wait before loading weights (staggers replicas; tests observe 'loading')
    warmup: bool = True  # generate on a page of each shape after loading, before reporting ready
    split_pages: str = "off"  # off | auto: cut pages the crop grid cannot show well into overlapping parts
    split_max_downscale: float = 2.0  # auto-split a page whose text the model would see shrunk more than this
    split_overlap: float = 0.1  # share of each part that the next part repeats
    split_max_parts: int = 6
    # None: max(2 x TIMEOUT_SEC, 60) (timeouts.py), filled in by ServerConfig. An engine that owes
    # work and has made no progress for longer fails /health/live (liveness.py).
    liveness_stall_sec: float | None = None
    # transformers engine's decoder (engines/transformers/slots.py): auto = slots (on every device; generate is the reference).
    decoder: str = "auto"
    dtype: str = "auto"  # the weights' and activations' precision, both engines: resolve_dtype
    decode_slots: int = _default("DECODE_SLOTS")  # rows decoded at once with DECODER=slots; 0: 64 on a GPU, BATCH_SIZE on a CPU
    decode_kv_buckets: str = ""  # KV lengths a step is shaped for (comma-separated); empty: 512, 1024, ... up to the longest row
    cuda_graphs: bool = True  # capture the slots decoder's step as CUDA graphs during the warm-up (GPU only)
    decode_compile: bool = False  # torch.compile the slots decoder's step before its graphs are captured (GPU only)
    experts: str = "auto"  # routed experts in the slots decoder: auto | grouped_mm | batched_mm | eager (engines/transformers/experts.py)
    prefill_share: float = 0.9  # prefills' share of engine time while rows decode (slot_runner.py); 1: first
    # Modules imported at start that may hook the engine thread (plugins.py); tests only.
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServerConfig:
    service: ServiceConfig = field(default_factory=ServiceConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        if self.model.max_visual_tokens is None:
            cap = default_max_visual_tokens(self.runtime.engine)
            object.__setattr__(self, "model", replace(self.model, max_visual_tokens=cap))
        if self.runtime.batch_queue_threshold is None:
            threshold = default_batch_queue_threshold(self.runtime.queue_size)
            object.__setattr__(self, "runtime", replace(self.runtime, batch_queue_threshold=threshold))
        if self.runtime.preprocess_workers is None:
            workers = default_preprocess_workers(usable_cpus())
            object.__setattr__(self, "runtime", replace(self.runtime, preprocess_workers=workers))
        if self.runtime.liveness_stall_sec is None:
            stall = default_liveness_stall_seconds(self.runtime.timeout_sec)
            object.__setattr__(self, "runtime", replace(self.runtime, liveness_stall_sec=stall))
        validate(self)


def _section_key(key: str) -> tuple[str, str]:
    section, name = key.split(".")
    return section, name


# env var -> (section, field). The settings an OcrService sets through its fields, and the server's
# queue settings, name both in ocr_limits (the operator renders the same keys into config.yaml); the
# server's own settings are listed here.
ENV_KEYS: dict[str, tuple[str, str]] = {
    **{s.env: _section_key(s.key) for s in (*SETTINGS, *SERVER_SETTINGS)},
    "HOST": ("service", "host"),
    "API_KEYS": ("service", "api_keys"),
    "API_KEYS_FILE": ("service", "api_keys_file"),
    "MAX_BODY_BYTES": ("service", "max_body_bytes"),
    "BODY_TIMEOUT_SEC": ("service", "body_timeout_sec"),
    "HEADER_TIMEOUT_SEC": ("service", "header_timeout_sec"),
    "MAX_CONNECTIONS": ("service", "max_connections"),
    "MAX_PAGES": ("service", "max_pages"),
    "CACHE_ENTRIES": ("service", "cache_entries"),
    "CACHE_MAX_BYTES": ("service", "cache_max_bytes"),
    "LOG_LEVEL": ("service", "log_level"),
    "OCR_REVISION": ("service", "revision"),
    "TLS_CERT_FILE": ("service", "tls_cert_file"),
    "TLS_KEY_FILE": ("service", "tls_key_file"),
    "REQUIRE_CHECKSUMS": ("model", "require_checksums"),
    "GPU_ID": ("runtime", "gpu_id"),
    "DEVICE": ("runtime", "device"),
    "DTYPE": ("runtime", "dtype"),
    "BATCH_WAIT_MS": ("runtime", "batch_wait_ms"),
    "LOAD_DELAY_SEC": ("runtime", "load_delay_sec"),
    "PREPROCESS_WORKERS": ("runtime", "preprocess_workers"),
    "PREPROCESS_MODE": ("runtime", "preprocess_mode"),
    "WARMUP": ("runtime", "warmup"),
    "SPLIT_PAGES": ("runtime", "split_pages"),
    "LIVENESS_STALL_SEC": ("runtime", "liveness_stall_sec"),
    "DECODER": ("runtime", "decoder"),
    "DECODE_KV_BUCKETS": ("runtime", "decode_kv_buckets"),
    "CUDA_GRAPHS": ("runtime", "cuda_graphs"),
    "DECODE_COMPILE": ("runtime", "decode_compile"),
    "EXPERTS": ("runtime", "experts"),
    "PREFILL_SHARE": ("runtime", "prefill_share"),
    "SERVER_PLUGINS": ("runtime", "plugins"),
}
_KEY_FOR = {v: k for k, v in ENV_KEYS.items()}
_SECTIONS = {"service": ServiceConfig, "model": ModelConfig, "runtime": RuntimeConfig}


def key_name(section: str, name: str) -> str:
    """The name a user knows a setting by: the env var if there is one, else section.field."""
    return _KEY_FOR.get((section, name), f"{section}.{name}")


# Settings whose default is None until ServerConfig fills it in from another setting, by type.
_FILLED_IN = {"max_visual_tokens": int, "liveness_stall_sec": float, "batch_queue_threshold": int,
              "batch_max_running": int, "preprocess_workers": int}


def _coerce(section: str, name: str, value: Any, default: Any) -> Any:
    key = key_name(section, name)
    if value is None and name in _FILLED_IN:
        return None
    if name in ("api_keys", "plugins"):
        if value is None:
            return ()
        if isinstance(value, str):
            return tuple(k.strip() for k in value.split(",") if k.strip())
        return tuple(str(k) for k in value)
    if name in ("path", "tls_cert_file", "tls_key_file", "api_keys_file"):
        return str(value) if value not in (None, "") else None
    target = type(default) if default is not None else _FILLED_IN.get(name, str)
    try:
        if target is bool:
            word = str(value).strip().lower()
            if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError
            return word in ("1", "true", "yes", "on")
        if target is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(str(value).strip())
        if target is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}={value!r} is not a valid {target.__name__}") from None


def load_config(config_file: str | None = None, env: Mapping[str, str] | None = None) -> ServerConfig:
    """Defaults (the dataclasses above: the one place the server's defaults live) <- YAML file
    (CONFIG_FILE) <- environment. Raises ConfigError."""
    env = os.environ if env is None else env
    config_file = config_file or env.get("CONFIG_FILE")
    raw: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    if config_file:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"CONFIG_FILE={config_file!r} does not exist")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"CONFIG_FILE={config_file!r} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"CONFIG_FILE={config_file!r} must hold a mapping with sections service, model, runtime")
        for section, values in data.items():
            if section not in _SECTIONS:
                raise ConfigError(f"unknown section {section!r} in {config_file}; allowed: service, model, runtime")
            if not isinstance(values, dict):
                raise ConfigError(f"section {section!r} in {config_file} must be a mapping")
            allowed = {f.name for f in fields(_SECTIONS[section])}
            for name, value in values.items():
                if name not in allowed:
                    raise ConfigError(f"unknown key {section}.{name} in {config_file}; allowed: {sorted(allowed)}")
                raw[section][name] = value
    for env_key, (section, name) in ENV_KEYS.items():
        if env_key in env and env[env_key] != "":
            raw[section][name] = env[env_key]
    built = {}
    for section, cls in _SECTIONS.items():
        defaults = cls()
        values = {n: _coerce(section, n, v, getattr(defaults, n)) for n, v in raw[section].items()}
        built[section] = replace(defaults, **values)
    return ServerConfig(**built)


def _fail(key: str, value: Any, allowed: str) -> None:
    raise ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def validate(cfg: ServerConfig) -> None:
    s, m, r = cfg.service, cfg.model, cfg.runtime
    _in_range("PORT", s.port)
    if s.max_body_bytes < 1024:
        _fail("MAX_BODY_BYTES", s.max_body_bytes, ">= 1024")
    if not 1 <= s.max_pages <= 200:
        _fail("MAX_PAGES", s.max_pages, "1..200")
    if not 36 <= s.pdf_dpi <= 600:
        _fail("service.pdf_dpi", s.pdf_dpi, "36..600")
    if s.cache_entries < 0:
        _fail("CACHE_ENTRIES", s.cache_entries, ">= 0 (0 disables the cache)")
    if s.cache_max_bytes < 0:
        _fail("CACHE_MAX_BYTES", s.cache_max_bytes, ">= 0 (0 disables the cache)")
    if bool(s.tls_cert_file) != bool(s.tls_key_file):
        _fail("TLS_CERT_FILE" if not s.tls_cert_file else "TLS_KEY_FILE", None,
              "TLS_CERT_FILE and TLS_KEY_FILE are set together (HTTPS) or not at all (HTTP)")
    for key, value in (("TLS_CERT_FILE", s.tls_cert_file), ("TLS_KEY_FILE", s.tls_key_file)):
        if value and not Path(value).is_file():
            _fail(key, value, "an existing PEM file")
    if any(len(k) < 8 for k in s.api_keys):
        _fail("API_KEYS", "<redacted>", "comma-separated keys of at least 8 characters each")
    if s.api_keys_file:
        if s.api_keys:
            _fail("API_KEYS_FILE", s.api_keys_file, "API_KEYS or API_KEYS_FILE, not both")
        try:
            load_keys(s.api_keys_file)
        except ReloadError as exc:
            raise ConfigError(f"{exc} (one key of at least 8 characters per line, or comma-separated)") from None
    if not 1 <= s.body_timeout_sec <= MAX_BODY_TIMEOUT_SEC:
        _fail("BODY_TIMEOUT_SEC", s.body_timeout_sec, f"1..{MAX_BODY_TIMEOUT_SEC} seconds")
    if not 1 <= s.header_timeout_sec <= MAX_HEADER_TIMEOUT_SEC:
        _fail("HEADER_TIMEOUT_SEC", s.header_timeout_sec, f"1..{MAX_HEADER_TIMEOUT_SEC} seconds")
    if not 1 <= s.max_connections <= MAX_CONNECTIONS:
        _fail("MAX_CONNECTIONS", s.max_connections, f"1..{MAX_CONNECTIONS}")
    _in_range("MAX_INFLIGHT_BODY_BYTES", s.max_inflight_body_bytes)
    if s.max_inflight_body_bytes < largest_body_bytes(s.max_body_bytes):
        _fail("MAX_INFLIGHT_BODY_BYTES", s.max_inflight_body_bytes, f">= {largest_body_bytes(s.max_body_bytes)}, the "
              f"largest body MAX_BODY_BYTES={s.max_body_bytes} allows (a base64 JSON body), or it could never be read")
    _in_range("TLS_HANDSHAKE_TIMEOUT_SEC", s.tls_handshake_timeout_sec)
    # Crop sizes must be multiples of patch*downsample (64) to give a square token grid; the
    # model-specific check (query embeddings 144/256) comes in validate_against_model.
    for key, value in (("INPUT_SIZE", m.input_size), ("BASE_SIZE", m.base_size)):
        if value <= 0 or value % TOKEN_STRIDE:
            _fail(key, value, f"a positive multiple of {TOKEN_STRIDE}; DeepSeek-OCR-2 uses INPUT_SIZE {_default('INPUT_SIZE')} "
                              f"and BASE_SIZE {_default('BASE_SIZE')}")
    for key, value in (("MAX_VISUAL_TOKENS", m.max_visual_tokens), ("MIN_VISUAL_TOKENS", m.min_visual_tokens)):
        if not TOKEN_FLOOR <= value <= TOKEN_CEILING:
            _fail(key, value, f"{TOKEN_FLOOR}..{TOKEN_CEILING} (global view {GLOBAL_TOKENS} + {CROP_TOKENS} per crop, "
                  f"{MIN_CROPS}..{MAX_CROPS} crops)")
    if m.max_visual_tokens < m.min_visual_tokens:
        _fail("MAX_VISUAL_TOKENS", m.max_visual_tokens, f">= MIN_VISUAL_TOKENS ({m.min_visual_tokens})")
    if not token_budget_fits(m.min_visual_tokens, m.max_visual_tokens):
        _fail(
            "MIN_VISUAL_TOKENS", m.min_visual_tokens,
            f"needs {crops_required(m.min_visual_tokens)} crops but MAX_VISUAL_TOKENS={m.max_visual_tokens} allows "
            f"{crops_allowed(m.max_visual_tokens)}; possible counts are {', '.join(map(str, TOKEN_STEPS))}",
        )
    if not m.path and not m.name:
        _fail("MODEL_NAME", m.name, "a model name (a folder under CACHE_DIR) or set MODEL_PATH")
    if r.engine not in ENGINES:
        _fail("ENGINE", r.engine, " or ".join(ENGINES))
    else:
        _validate_engine(m, engine_limits(r.engine))
    if r.gpu_id < 0:
        _fail("GPU_ID", r.gpu_id, ">= 0")
    if r.device not in ("auto", "cpu", "cuda"):
        _fail("DEVICE", r.device, "auto, cpu or cuda")
    if r.dtype not in DTYPES:
        _fail("DTYPE", r.dtype, ", ".join(DTYPES))
    _in_range("CONCURRENCY", r.concurrency)
    _in_range("BATCH_SIZE", r.batch_size)
    if not 0 <= r.batch_wait_ms <= 1000:
        _fail("BATCH_WAIT_MS", r.batch_wait_ms, "0..1000")
    _in_range("QUEUE_SIZE", r.queue_size)
    if not 0 <= r.batch_queue_threshold <= r.queue_size:
        _fail("BATCH_QUEUE_THRESHOLD", r.batch_queue_threshold, f"0..QUEUE_SIZE ({r.queue_size}); unset: half of QUEUE_SIZE")
    if r.batch_max_running is not None:
        _in_range("BATCH_MAX_RUNNING", r.batch_max_running)
    if not 0 < r.timeout_sec <= _bounds("TIMEOUT_SEC")[1]:
        _fail("TIMEOUT_SEC", r.timeout_sec, f"0 < value <= {_bounds('TIMEOUT_SEC')[1]} seconds")
    _in_range("MAX_NEW_TOKENS", r.max_new_tokens, "the model's max_position_embeddings")
    if not 0 <= r.load_delay_sec <= 600:
        _fail("LOAD_DELAY_SEC", r.load_delay_sec, "0..600 seconds")
    if not 1 <= r.preprocess_workers <= 64:
        _fail("PREPROCESS_WORKERS", r.preprocess_workers, "1..64")
    if r.split_pages not in ("off", "auto"):
        _fail("SPLIT_PAGES", r.split_pages, "off or auto")
    if not 1.0 <= r.split_max_downscale <= 16.0:
        _fail("runtime.split_max_downscale", r.split_max_downscale, "1.0..16.0")
    if not 0.0 <= r.split_overlap <= 0.5:
        _fail("runtime.split_overlap", r.split_overlap, "0.0..0.5")
    if not 2 <= r.split_max_parts <= 16:
        _fail("runtime.split_max_parts", r.split_max_parts, "2..16")
    if not 1 <= r.liveness_stall_sec <= MAX_LIVENESS_STALL_SEC:
        _fail("LIVENESS_STALL_SEC", r.liveness_stall_sec, f"1..{MAX_LIVENESS_STALL_SEC} seconds "
              "(unset: max(2 x TIMEOUT_SEC, 60))")
    for plugin in r.plugins:
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", plugin):
            _fail("SERVER_PLUGINS", plugin, "comma-separated module names, e.g. ocr_server_testing.faults")
    if r.decoder not in DECODERS:
        _fail("DECODER", r.decoder, ", ".join(DECODERS))
    _in_range("DECODE_SLOTS", r.decode_slots)
    if r.decode_kv_buckets and not re.fullmatch(r"\s*[1-9][0-9]{0,5}(\s*,\s*[1-9][0-9]{0,5})*\s*", r.decode_kv_buckets):
        _fail("DECODE_KV_BUCKETS", r.decode_kv_buckets, "comma-separated positive token counts, e.g. 1024,2048,4096")
    if r.experts not in EXPERTS:
        _fail("EXPERTS", r.experts, ", ".join(EXPERTS))
    if r.preprocess_mode not in PREPROCESS_MODES:
        _fail("PREPROCESS_MODE", r.preprocess_mode, ", ".join(PREPROCESS_MODES))
    if not 0.05 <= r.prefill_share <= 1:
        _fail("PREFILL_SHARE", r.prefill_share, "0.05..1 (1: prefills first)")
    if r.ngram_size < 0 or r.ngram_window < 0:
        _fail("runtime.ngram_size", r.ngram_size, ">= 0 (0 disables the n-gram guard)")


def _in_range(key: str, value: float, why: str = "") -> None:
    """A setting shared with the OcrService, within its bounds (ocr_limits.SETTINGS)."""
    lo, hi = _bounds(key)
    if not lo <= value <= hi:
        _fail(key, value, f"{lo}..{hi}" + (f" ({why} is {hi})" if why else ""))


def _validate_engine(m: ModelConfig, e: EngineLimits) -> None:
    """What the engine cannot serve (ocr_limits.engines): vLLM's DeepSeek-OCR 2 processor hard-codes
    768 px crops beside a 1024 px global view and picks 2..6 crops for every page larger than one
    crop (module constants its placeholder count assumes), so with ENGINE=vllm MIN_VISUAL_TOKENS is
    at most 544 (2 crops) and MAX_VISUAL_TOKENS exactly 1120 (6 crops): a lower cap cannot be applied."""
    if e.fixed_sizes is not None and (m.input_size, m.base_size) != e.fixed_sizes:
        crop, base = e.fixed_sizes
        key, value = ("INPUT_SIZE", m.input_size) if m.input_size != crop else ("BASE_SIZE", m.base_size)
        _fail(key, value, f"ENGINE={e.name} serves INPUT_SIZE {crop} with BASE_SIZE {base} only: {e.why}")
    if m.min_visual_tokens > e.highest_min_visual_tokens:
        _fail("MIN_VISUAL_TOKENS", m.min_visual_tokens,
              f"<= {e.highest_min_visual_tokens} with ENGINE={e.name}, which cannot demand more crops: {e.why}")
    if e.fixed_max_visual_tokens is not None and m.max_visual_tokens != e.fixed_max_visual_tokens:
        _fail("MAX_VISUAL_TOKENS", m.max_visual_tokens,
              f"{e.fixed_max_visual_tokens} with ENGINE={e.name} (leave it unset for that default), since a lower cap "
              f"cannot be applied: {e.why}")


def validate_against_model(cfg: ServerConfig, query_sizes: Mapping[int, int]) -> None:
    """INPUT_SIZE/BASE_SIZE must produce a token count the model has query embeddings for.

    query_sizes maps image size -> query count of the loaded model (768 -> 144, 1024 -> 256);
    the tokens one view yields are (size / 16 / 4)^2.
    """
    supported = ", ".join(str(s) for s in sorted(query_sizes))
    for key, value in (("INPUT_SIZE", cfg.model.input_size), ("BASE_SIZE", cfg.model.base_size)):
        if value not in query_sizes:
            _fail(key, value, f"one of {supported}: this model has query embeddings only for "
                  + ", ".join(f"{s}px ({n} tokens)" for s, n in sorted(query_sizes.items())))
    if cfg.model.input_size >= cfg.model.base_size:
        _fail("INPUT_SIZE", cfg.model.input_size, f"smaller than BASE_SIZE ({cfg.model.base_size})")
