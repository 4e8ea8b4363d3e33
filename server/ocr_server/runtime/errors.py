"""The one error table: each error the API answers on purpose, with its HTTP status and error type.

Every layer raises these; the HTTP layer (http/errors.py) turns them into answers, never tracebacks.
"""

from __future__ import annotations


class OcrError(Exception):
    """Base of every error the API answers on purpose."""

    status = 500
    type = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after


class BadInput(OcrError):
    status, type = 400, "invalid_input"


class Unauthorized(OcrError):
    status, type = 401, "unauthorized"


class NotFound(OcrError):
    status, type = 404, "not_found"


class GoldenMissing(NotFound):
    """GET /v1/golden (serving/golden.py): GOLDEN_DIR unset, or no such folder."""

    type = "golden_pages_missing"


class ShadowUnavailable(NotFound):
    """/v1/shadow (serving/shadow.py) on a server without GATE_KEY_FILE or POD_IP: no gate can arm it."""

    type = "shadow_unavailable"


class GoldenTooLarge(OcrError):
    status, type = 413, "golden_pages_too_large"


class GoldenInvalid(OcrError):
    status, type = 422, "golden_pages_invalid"


class BodyTimeout(OcrError):
    """The body did not arrive within BODY_TIMEOUT_SEC; the connection is closed after the answer."""

    status, type = 408, "body_timeout"


class HeaderTimeout(OcrError):
    """The request line and headers did not arrive within HEADER_TIMEOUT_SEC (http/connections.py)."""

    status, type = 408, "header_timeout"


class PayloadTooLarge(OcrError):
    status, type = 413, "payload_too_large"


class HeadersTooLarge(OcrError):
    """The request line and headers exceed what the server reads of them (http/server.MAX_HEADER_BYTES)."""

    status, type = 431, "headers_too_large"


class UnsupportedMedia(OcrError):
    status, type = 415, "unsupported_media_type"


class InvalidOptions(OcrError):
    status, type = 422, "invalid_options"


class QueueFull(OcrError):
    status, type = 429, "queue_full"


class ModelLoading(OcrError):
    status, type = 503, "model_loading"


class BodyBudgetFull(OcrError):
    """The bodies of the requests in flight hold MAX_INFLIGHT_BODY_BYTES: this one is not read (http/budget.py)."""

    status, type = 503, "server_busy"


class DeadlineExceeded(OcrError):
    status, type = 504, "deadline_exceeded"


class EngineFailure(OcrError):
    """The model failed on a batch; the engine is considered dead and the process exits."""

    status, type = 500, "engine_failure"
