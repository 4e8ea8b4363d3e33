"""What the OcrService's fields set in the server: its config.yaml, and the env names spec.env may not set.

Both follow from the fields' settings (ocr_limits: env name, config key) and `sets_env`, so the
ConfigMap render, the CRD's spec.env rules and the operator's check read one mapping.
"""

from __future__ import annotations

from typing import Any, Iterator

from ..fields import FieldInfo, Rule, fields_of
from .root import OcrServiceSpec

# Names the operator sets besides the fields' own: the config file it renders from the spec.
OPERATOR_ENV = {"CONFIG_FILE": "spec.engine, spec.model and spec.inference"}
# Keys of config.yaml the operator fixes for every pod: the server listens on all interfaces and
# uses the first GPU the pod was given.
FIXED_CONFIG = {"service.host": "0.0.0.0", "runtime.gpu_id": 0}


def spec_fields(cls: type = OcrServiceSpec, prefix: str = "spec") -> Iterator[tuple[str, FieldInfo]]:
    """Every field under `cls` with its path as users write it (spec.inference.maxVisualTokens)."""
    seen = set()
    for f in fields_of(cls):
        path = f"{prefix}.{f.json}"
        inner = f.via[0] if f.via is not None else f.type.cls if f.type.kind == "object" else None
        if inner is not None and path not in seen:
            seen.add(path)
            yield from spec_fields(inner, path)
        if f.via is None:
            yield path, f


def _field_for_env() -> dict[str, str]:
    out: dict[str, str] = {}
    for path, f in spec_fields():
        names = ((f.api.setting.env,) if f.api.setting is not None and f.api.setting.env else ()) + f.api.sets_env
        for env in names:
            assert env not in out, f"{env} is set by {out[env]} and {path}"
            out[env] = path
    return {**out, **OPERATOR_ENV}


# Environment names spec.env may not set (the operator sets them, and the server lets the
# environment win over its file) -> the OcrService field to set instead.
FIELD_FOR_ENV = _field_for_env()


def env_override_error(env: str) -> str:
    """Why spec.env may not set `env`: the operator sets it from an OcrService field."""
    return (f"spec.env must not set {env}: set {FIELD_FOR_ENV[env]} instead (the operator sets {env} itself, "
            "and an env value would override it)")


def env_rules() -> tuple[Rule, ...]:
    """One rule per name on each spec.env item."""
    return tuple(Rule(f"self.name != '{env}'", env_override_error(env), ".name", lambda e, env=env: e.name != env)
                 for env in FIELD_FOR_ENV)


def _settings(obj: Any) -> Iterator[tuple[str, Any]]:
    for f in fields_of(type(obj)):
        value = getattr(obj, f.name)
        s = f.api.setting
        if s is not None and s.key:
            if value not in (None, "") and not (f.api.omit_default and value == f.api.default):
                yield s.key, value
        elif f.type.kind == "object" and f.via is None and value is not None:
            yield from _settings(value)


def server_config(spec: OcrServiceSpec) -> dict[str, dict[str, Any]]:
    """The server's configuration file (its sections service, model, runtime): every setting an
    OcrService field sets, under the key the server reads (ocr_limits), exactly the keys the
    server knows, since it refuses unknown ones. A value left unset (None or empty), or at its
    default where the field says so, is left out: the server's own default applies. Every
    CRD-valid spec renders a file the server's startup validation accepts
    (tests/unit/test_config_contract.py)."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in [*FIXED_CONFIG.items(), *_settings(spec)]:
        section, name = key.split(".")
        out.setdefault(section, {})[name] = value
    return out
