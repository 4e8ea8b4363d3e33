"""The vocabulary of the typed API models: each field says once everything the API knows about it.

A model is a frozen, keyword-only dataclass decorated with `@model`; each field is `api(...)`:
its description, default, bounds, CEL rules, and (through `setting=`) the server setting it sets,
whose env name, config key, default and bounds live in ocr_limits, where the server reads them
too. The field's Python name is the wire name in snake_case (`maxVisualTokens` is
`max_visual_tokens`; `json=` only where camelCase cannot say it, e.g. `targetGPUUtilization`).
From these definitions openapi.py writes the CRD schema and codec.py parses, defaults and
validates a spec, so a default, a bound or a rule's message is written here and nowhere else.

The Python type gives the schema type:
- int, float, str, bool; `Quantity` (int or string on the wire, str in Python); `IntOrString`;
- a model class: an object; `X | None`: optional (no default); `tuple[X, ...]`: an array;
  `tuple[tuple[str, V], ...]`: a map (additionalProperties), kept sorted;
- `Mapping[str, Any]`: a Kubernetes type passed through as written (affinity, env, tolerations),
  checked against `shape=` (a model) when given, else free-form.
`via=(Model, "attr")` keeps one attribute of a wire object as the field's value (the wire key is
`json=`), so `tls: {secretName}` can be `tls_secret_name`; several fields may share one wire key.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import types
import typing
from dataclasses import dataclass
from functools import cache
from typing import Any, Callable, NewType, Union

from ocr_limits import Setting
from ocr_limits import setting as limits_setting

Quantity = NewType("Quantity", str)
IntOrString = Union[int, str]
# The string forms of a rolling update's or disruption budget's count (IntOrString's `pattern`; an int is
# the other form): any percentage, or one of at most 100 %.
PERCENT = r"^[0-9]+%$"
PERCENT_UP_TO_100 = r"^(100|[1-9]?[0-9])%$"


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Rule:
    """A CEL rule of the schema (x-kubernetes-validations) and the same check in Python.

    `holds` gets the parsed value of the node the rule sits on; None for a rule only the API
    server can evaluate (a transition rule reading oldSelf)."""

    cel: str
    message: str
    field_path: str | None = None
    holds: Callable[[Any], bool] | None = None


@dataclass(frozen=True)
class Constraints:
    """What the schema bounds on one node (a field, or its items / map values)."""

    enum: tuple[Any, ...] = ()
    minimum: int | float | None = None
    maximum: int | float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    max_items: int | None = None
    max_properties: int | None = None
    format: str | None = None
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class Api(Constraints):
    """One field of a model: its constraints plus what the field is."""

    description: str = ""
    json: str | None = None
    default: Any = NO_DEFAULT  # the schema's default (and Python's); {} for an object field
    required: bool = False
    setting: Setting | None = None  # the ocr_limits setting this field sets (api() takes its env name)
    limit: Any = None  # the ocr_limits bounds of a field another program re-checks (ocr_limits.batch)
    sets_env: tuple[str, ...] = ()  # other env names the operator sets from this field
    omit_default: bool = False  # left out of the server's config file when at its default
    item: Constraints | None = None  # of scalar array items or map values
    shape: type | None = None  # the model a Mapping field (or its items) must match
    via: tuple[type, str] | None = None
    list_map_keys: tuple[str, ...] = ()
    preserve_unknown: bool = False

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


def api(description: str = "", **kwargs: Any) -> Any:
    """A model field (a dataclasses.Field whose Python default `@model` fills in from its type).
    `setting=ENV` (a server setting) or `limit=` (ocr_limits.batch's bounds of an OcrBatch field,
    which its worker reads there too) takes default, bounds and choices from ocr_limits; they are
    not repeated here."""
    bounded = kwargs.get("limit")
    if bounded is not None:
        taken = {"default", "minimum", "maximum", "enum"} & set(kwargs)
        assert not taken, f"{bounded.spec_path}: {sorted(taken)} come from ocr_limits, not from the model"
        if bounded.default is not None:
            kwargs["default"] = bounded.default
        kwargs.update(minimum=bounded.minimum, maximum=bounded.maximum, enum=tuple(bounded.choices))
    s = kwargs.get("setting")
    if s is not None:
        s = kwargs["setting"] = limits_setting(s) if isinstance(s, str) else s
        taken = {"default", "minimum", "maximum", "enum"} & set(kwargs)
        assert not taken, f"{s.key}: {sorted(taken)} come from ocr_limits, not from the model"
        if s.default is not None:
            kwargs["default"] = s.default
        kwargs.update(minimum=s.minimum, maximum=s.maximum, enum=tuple(s.choices))
        description = description.replace("{env}", s.env or "")
    return dataclasses.field(metadata={"api": Api(description=description, **kwargs)})


# --- the types ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class TypeInfo:
    """What a field's annotation means on the wire."""

    kind: str  # int, float, str, bool, quantity, int-or-string, object, array, map, raw
    optional: bool = False
    cls: type | None = None  # the model of an object
    item: "TypeInfo | None" = None  # of an array, or a map's values


SCALARS = {int: "int", float: "float", str: "str", bool: "bool"}


def type_info(hint: Any) -> TypeInfo:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if set(rest) == {int, str}:
            return TypeInfo("int-or-string", optional=len(rest) < len(args))
        assert len(rest) == 1, hint
        return dataclasses.replace(type_info(rest[0]), optional=len(rest) < len(args))
    if hint is Quantity:
        return TypeInfo("quantity")
    if hint in SCALARS:
        return TypeInfo(SCALARS[hint])
    if dataclasses.is_dataclass(hint):
        return TypeInfo("object", cls=hint)
    if origin is tuple:
        inner = args[0]
        if typing.get_origin(inner) is tuple and typing.get_args(inner)[0] is str:
            return TypeInfo("map", item=type_info(typing.get_args(inner)[1]))
        return TypeInfo("array", item=type_info(inner))
    if origin in (collections.abc.Mapping, dict) or hint is Any:
        return TypeInfo("raw")
    raise TypeError(f"no API type for {hint!r}")


@dataclass(frozen=True)
class FieldInfo:
    """A model field: its Python name, wire name, type and API metadata."""

    name: str
    json: str
    type: TypeInfo
    api: Api

    @property
    def via(self) -> tuple[type, str] | None:
        return self.api.via


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@cache
def fields_of(cls: type) -> tuple[FieldInfo, ...]:
    """The API fields of a model, in declaration order (the schema's order)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("api")
        assert meta is not None, f"{cls.__name__}.{f.name} is not an api() field"
        out.append(FieldInfo(f.name, meta.json or camel(f.name), type_info(hints[f.name]), meta))
    return tuple(out)


@cache
def rules_of(cls: type) -> tuple[Rule, ...]:
    """A model's own rules: its `__rules__`, a tuple or a function returning one (for rules
    built from the finished models, such as the spec.env names)."""
    rules = cls.__dict__.get("__rules__", ())
    return tuple(rules() if callable(rules) else rules)


def description_of(cls: type) -> str:
    """A model's own description, where a schema node has no field to describe it (array items,
    a `via` object): its `__description__`, else its docstring (a dataclass without one has none)."""
    doc = cls.__dict__.get("__description__") or cls.__doc__ or ""
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())


def model(cls: type) -> type:
    """Make `cls` a frozen keyword-only dataclass whose Python defaults follow its api() fields:
    the schema default (an object field's {} is its model's own defaults), else None for an
    optional field and () for an array or map; a field with neither is required."""
    hints = typing.get_type_hints(cls)
    for name in cls.__dict__.get("__annotations__", {}):
        f = cls.__dict__.get(name)
        meta = f.metadata.get("api") if isinstance(f, dataclasses.Field) else None
        assert meta is not None, f"{cls.__name__}.{name} needs api(...)"
        info = type_info(hints[name])
        new = dataclasses.field(metadata=f.metadata)
        if meta.has_default and info.kind == "object":
            assert meta.default == {}, f"{cls.__name__}.{name}: an object's default is {{}}"
            new = dataclasses.field(default_factory=info.cls, metadata=f.metadata)
        elif meta.has_default:
            new = dataclasses.field(default=meta.default, metadata=f.metadata)
        elif info.optional:
            new = dataclasses.field(default=None, metadata=f.metadata)
        elif info.kind in ("array", "map"):
            new = dataclasses.field(default=(), metadata=f.metadata)
        setattr(cls, name, new)
    return dataclass(frozen=True, kw_only=True)(cls)
