"""Every limit and default the CausalFlow OCR operator and server share, written once.

The operator (its typed API models, and through them the CRDs' defaults, enums and CEL rules and
its own checks) and the server (its configuration defaults and startup checks, the
crop plan) both import these, so a limit cannot differ between the API server, the operator and a
running pod. Pure data and pure functions, one small dependency (rapidfuzz, for the quality gate's
page distance): the operator image imports this without torch, and this package imports nothing of
the project.

- tokens: the model's visual-token arithmetic (views, crops, 256..1120);
- engines: what each inference engine can serve, and the defaults that follow the engine;
- settings: the server settings an OcrService sets by its fields (env names, config keys, defaults,
  bounds), and the server's own queue limits, which it sets through spec.env.
"""

from .engines import (
    DEFAULT_ENGINE,
    ENGINE_LIMITS,
    ENGINES,
    TRANSFORMERS,
    VLLM,
    EngineLimits,
    default_max_visual_tokens,
    engine_limits,
)
from .settings import (
    DEFAULT_CACHE_DIR,
    DEFAULT_MODEL_NAME,
    DEFAULT_PORT,
    GRACEFUL_SHUTDOWN_MARGIN_SEC,
    SERVER_SETTINGS,
    SETTINGS,
    Setting,
    default_batch_max_running,
    default_batch_queue_threshold,
    graceful_shutdown_seconds,
    setting,
    split_keys,
)
from .tokens import (
    BASE_SIZE,
    CROP_COUNTS,
    CROP_SIZE,
    CROP_TOKENS,
    DOWNSAMPLE,
    GLOBAL_TOKENS,
    MAX_CROPS,
    MIN_CROPS,
    PATCH_SIZE,
    TOKEN_CEILING,
    TOKEN_FLOOR,
    TOKEN_STEPS,
    TOKEN_STRIDE,
    VIEW_SIZES,
    crops_allowed,
    crops_required,
    token_budget_fits,
    view_tokens,
    visual_tokens,
)

__all__ = [
    "BASE_SIZE", "CROP_COUNTS", "CROP_SIZE", "CROP_TOKENS", "DEFAULT_CACHE_DIR", "DEFAULT_ENGINE",
    "DEFAULT_MODEL_NAME", "DEFAULT_PORT", "DOWNSAMPLE", "ENGINES", "ENGINE_LIMITS", "EngineLimits",
    "GLOBAL_TOKENS", "MAX_CROPS", "MIN_CROPS", "PATCH_SIZE", "SERVER_SETTINGS", "SETTINGS",
    "Setting", "TOKEN_CEILING", "TOKEN_FLOOR", "TOKEN_STEPS", "TOKEN_STRIDE", "TRANSFORMERS", "VIEW_SIZES",
    "VLLM", "crops_allowed", "crops_required", "default_batch_max_running", "default_batch_queue_threshold", "default_max_visual_tokens",
    "engine_limits", "setting", "split_keys", "token_budget_fits", "view_tokens", "visual_tokens",
]
