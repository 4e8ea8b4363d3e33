"""The worker's configuration: a JSON document the operator renders from the OcrBatch (mounted
from a ConfigMap, BATCH_CONFIG_FILE, or inline in BATCH_CONFIG), and the Job's index.

Fields follow the OcrBatch spec's names, so an error names what the user wrote:

    {"serviceUrl": "http://invoices.ocr.svc:8080",
     "input":  {"pvc": {"path": "/batch/input"}}      # or {"s3": {"url": "s3://bucket/in/"}}
     "output": {"pvc": {"path": "/batch/output"}},
     "options": {"mode": "markdown", "maxNewTokens": 2048},       # or "prompt"
     "limits": {"maxDocumentBytes": 104857600, "maxPagesPerDocument": 1000, "maxDocuments": 100000,
                "storageRetrySeconds": 600},
     "parallelism": 4, "concurrencyPerWorker": 4,
     "maxRetries": 5, "requestTimeoutSeconds": 600, "progressIntervalSeconds": 10,
     "apiKeyFile": "/var/run/ocr/api-key", "caFile": "/var/run/ocr/ca.crt",
     "serverName": "invoices.ocr.svc",      # the name the server's certificate is checked against
     "maxBodyBytes": 20971520}               # the OcrService's body limit (default: the server's)

A pvc path is where the claim (and its spec path) is mounted in the worker's pod; an s3 location's
credentials are environment variables (storage.open_store), never in this file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ocr_limits.batch import batch_setting
from ocr_limits.files import MAX_BODY_BYTES
from ocr_limits.prompts import MAX_PROMPT_CHARS, MODES

from .contract import CONFIG_FILE_ENV, CONFIG_INLINE_ENV, INDEX_ENV
from .jsontext import JsonTextError, json_object
from .retry import RetryPolicy

MAX_CONFIG_BYTES = 256 * 1024
_DNS_NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")


class ConfigError(Exception):
    """The configuration is invalid; the message names the field."""


@dataclass(frozen=True)
class Location:
    kind: str  # "pvc" or "s3"
    path: str  # the mounted directory, or the s3:// URL


@dataclass(frozen=True)
class WorkerConfig:
    service_url: str
    input: Location
    output: Location
    options: dict[str, str]  # the /v1/ocr form fields: prompt_mode or prompt, max_new_tokens
    max_document_bytes: int
    max_pages: int
    max_documents: int
    shards: int
    index: int
    concurrency: int
    request_timeout: float
    progress_interval: float
    retry: RetryPolicy
    api_key_file: str | None = None
    ca_file: str | None = None
    server_name: str | None = None  # TLS: the certificate's name, when serviceUrl holds an IP
    storage_retry_seconds: float = 600.0  # the longest storage outage waited out (patience.py)
    max_body_bytes: int = MAX_BODY_BYTES  # a page larger than this is refused before it is sent


def _int(d: Mapping[str, Any], key: str, path: str, field: str | None = None) -> int:
    s = batch_setting(field) if field else None
    value = d.get(key, s.default if s else None)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: must be an integer, not {value!r}")
    lo, hi = (s.minimum, s.maximum) if s else (0, None)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ConfigError(f"{path}: {value} is not in {lo}..{hi}")
    return value


def _number(d: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = d.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"{key}: must be a number in {lo:g}..{hi:g}, not {value!r}")
    return float(value)


def _object(d: Mapping[str, Any], key: str, path: str, required: bool = True) -> Mapping[str, Any]:
    value = d.get(key, None if required else {})
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: must be an object" + (" (required)" if value is None else ""))
    return value


def _location(d: Mapping[str, Any], key: str) -> Location:
    loc = _object(d, key, key)
    kinds = [k for k in ("pvc", "s3") if k in loc]
    if len(kinds) != 1 or set(loc) - {"pvc", "s3"}:
        raise ConfigError(f"{key}: needs exactly one of {key}.pvc or {key}.s3")
    inner = _object(loc, kinds[0], f"{key}.{kinds[0]}")
    field = "path" if kinds[0] == "pvc" else "url"
    value = inner.get(field)
    if not isinstance(value, str) or not value or len(value) > 4096:
        raise ConfigError(f"{key}.{kinds[0]}.{field}: must be a non-empty string")
    if kinds[0] == "pvc" and not value.startswith("/"):
        raise ConfigError(f"{key}.pvc.path: must be an absolute path, not {value!r}")
    if kinds[0] == "s3" and not value.startswith("s3://"):
        raise ConfigError(f"{key}.s3.url: must start with s3://, not {value!r}")
    return Location(kinds[0], value)


def _options(d: Mapping[str, Any]) -> dict[str, str]:
    opts = _object(d, "options", "options", required=False)
    unknown = set(opts) - {"mode", "prompt", "maxNewTokens"}
    if unknown:
        raise ConfigError(f"options.{sorted(unknown)[0]}: unknown option (mode, prompt, maxNewTokens)")
    out: dict[str, str] = {}
    if "mode" in opts and "prompt" in opts:
        raise ConfigError("options.prompt: options.mode and options.prompt are mutually exclusive")
    if "mode" in opts:
        if opts["mode"] not in MODES:
            raise ConfigError(f"options.mode: must be one of {', '.join(MODES)}, not {opts['mode']!r}")
        out["prompt_mode"] = opts["mode"]
    if "prompt" in opts:
        if not isinstance(opts["prompt"], str) or not 1 <= len(opts["prompt"]) <= MAX_PROMPT_CHARS:
            raise ConfigError(f"options.prompt: must be a string of 1..{MAX_PROMPT_CHARS} characters")
        out["prompt"] = opts["prompt"]
    if "maxNewTokens" in opts:
        out["max_new_tokens"] = str(_int(opts, "maxNewTokens", "options.maxNewTokens", "options.maxNewTokens"))
    return out


def parse(doc: Mapping[str, Any], index: int) -> WorkerConfig:
    """The configuration from its JSON object and the Job index (JOB_COMPLETION_INDEX)."""
    url = doc.get("serviceUrl")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2048:
        raise ConfigError(f"serviceUrl: must be an http(s) URL, not {url!r}")
    limits = _object(doc, "limits", "limits", required=False)
    shards = _int(doc, "parallelism", "parallelism", "parallelism")
    if not 0 <= index < shards:
        raise ConfigError(f"{INDEX_ENV}: {index} is not in 0..{shards - 1} (parallelism {shards})")
    for key in ("apiKeyFile", "caFile"):
        if key in doc and (not isinstance(doc[key], str) or not doc[key].startswith("/")):
            raise ConfigError(f"{key}: must be an absolute path")
    server_name = doc.get("serverName")
    if server_name is not None and (not isinstance(server_name, str) or not _DNS_NAME.fullmatch(server_name)):
        raise ConfigError(f"serverName: must be a DNS name, not {server_name!r}")
    return WorkerConfig(
        service_url=url.rstrip("/"),
        input=_location(doc, "input"),
        output=_location(doc, "output"),
        options=_options(doc),
        max_document_bytes=_int(limits, "maxDocumentBytes", "limits.maxDocumentBytes", "limits.maxDocumentBytes"),
        max_pages=_int(limits, "maxPagesPerDocument", "limits.maxPagesPerDocument", "limits.maxPagesPerDocument"),
        max_documents=_int(limits, "maxDocuments", "limits.maxDocuments", "limits.maxDocuments"),
        shards=shards,
        index=index,
        concurrency=_int(doc, "concurrencyPerWorker", "concurrencyPerWorker", "concurrencyPerWorker"),
        request_timeout=_number(doc, "requestTimeoutSeconds", 600, 1, 3600),
        progress_interval=_number(doc, "progressIntervalSeconds", 10, 0, 3600),
        retry=RetryPolicy(max_retries=int(_number(doc, "maxRetries", 5, 0, 100))),
        api_key_file=doc.get("apiKeyFile"),
        ca_file=doc.get("caFile"),
        server_name=server_name,
        storage_retry_seconds=float(_int(limits, "storageRetrySeconds", "limits.storageRetrySeconds",
                                         "limits.storageRetrySeconds")),
        max_body_bytes=int(_number(doc, "maxBodyBytes", MAX_BODY_BYTES, 1024, 1 << 40)),
    )


def load(env: Mapping[str, str] = os.environ) -> WorkerConfig:
    """The configuration from BATCH_CONFIG_FILE (or BATCH_CONFIG) and JOB_COMPLETION_INDEX."""
    if CONFIG_FILE_ENV in env:
        path = env[CONFIG_FILE_ENV]
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{CONFIG_FILE_ENV}: {path} cannot be read: {exc.strerror}") from None
    elif CONFIG_INLINE_ENV in env:
        raw = os.fsencode(env[CONFIG_INLINE_ENV])  # the bytes given: os.environ keeps non-UTF-8 as surrogates
    else:
        raise ConfigError(f"{CONFIG_FILE_ENV} (or {CONFIG_INLINE_ENV}): the worker's configuration is required")
    source = CONFIG_FILE_ENV if CONFIG_FILE_ENV in env else CONFIG_INLINE_ENV  # named in every error below
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        doc = json_object(raw)
    except JsonTextError as exc:
        raise ConfigError(f"{source} {exc}") from None
    index_text = env.get(INDEX_ENV, "0")
    if not index_text.isdigit() or len(index_text) > 6:
        raise ConfigError(f"{INDEX_ENV}: must be a non-negative integer, not {index_text!r}")
    return parse(doc, int(index_text))
