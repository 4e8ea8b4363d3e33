"""A wire object (a custom resource's spec, as the API server stores it) to its typed model, and back.

`parse` applies the schema's defaults, checks each value's type, its bounds and every rule with a
Python check, and raises SpecError naming the field: the same checks the API server makes from the
CRD, for an object that never went through it (a unit test, an object stored before a rule was
added), from the same definitions. A value of the wrong type stops the parse at once; bound and
rule failures are collected, so one error lists them all. A null is read as absent, as the API
server prunes it.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache
from typing import Any, Mapping, TypeVar

from .fields import Constraints, FieldInfo, TypeInfo, fields_of, rules_of

T = TypeVar("T")


class SpecError(ValueError):
    """A spec the operator cannot use; the message names the field."""


def parse(cls: type[T], wire: Any, where: str = "spec") -> T:
    """The model `cls` of the wire object `wire` at `where`; raise SpecError naming the field."""
    errors: list[str] = []
    value = parse_object(cls, wire, where, errors)
    if errors:
        raise SpecError("; ".join(errors))
    return value


@cache
def _required(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)


def parse_object(cls: type[T], wire: Any, path: str, errors: list[str]) -> T:
    if not isinstance(wire, Mapping):
        raise SpecError(f"{path} must be an object, got {wire!r}")
    values: dict[str, Any] = {}
    vias: dict[str, Any] = {}
    for f in fields_of(cls):
        raw, sub = wire.get(f.json), f"{path}.{f.json}"
        if f.via is not None and f.type.kind != "array":
            if f.json not in vias:
                if raw is None and f.api.required:
                    raise SpecError(f"{sub} is required")
                if raw is None and f.api.has_default:
                    raw = f.api.default
                vias[f.json] = None if raw is None else parse_object(f.via[0], raw, sub, errors)
            values[f.name] = None if vias[f.json] is None else getattr(vias[f.json], f.via[1])
            continue
        if raw is None:
            if f.name in _required(cls) or f.api.required:
                raise SpecError(f"{sub} is required")
            if not f.api.has_default:
                continue
            raw = f.api.default
        values[f.name] = _field(f, raw, sub, errors)
    value = cls(**values)
    errors += [r.message for r in rules_of(cls) if r.holds is not None and not r.holds(value)]
    return value


def _field(f: FieldInfo, raw: Any, path: str, errors: list[str]) -> Any:
    info, a = f.type, f.api
    if info.kind == "array":
        if not isinstance(raw, (list, tuple)):
            raise SpecError(f"{path} must be a list, got {raw!r}")
        value: Any = tuple(_item(f, x, f"{path}[{i}]", errors) for i, x in enumerate(raw))
    elif info.kind == "map":
        if not isinstance(raw, Mapping):
            raise SpecError(f"{path} must be an object, got {raw!r}")
        value = tuple(sorted((str(k), _item(f, v, f"{path}.{k}", errors)) for k, v in raw.items()))
    else:
        value = _value(info, raw, path, errors, f.api.shape)
    check(a, value, path, errors)
    return value


def _item(f: FieldInfo, raw: Any, path: str, errors: list[str]) -> Any:
    """One array item or map value of field `f`."""
    if f.via is not None:
        return getattr(parse_object(f.via[0], raw, path, errors), f.via[1])
    value = _value(f.type.item, raw, path, errors, f.api.shape)
    if f.api.item is not None:
        check(f.api.item, value, path, errors)
    return value


def _value(info: TypeInfo, raw: Any, path: str, errors: list[str], shape: type | None) -> Any:
    kind = info.kind
    if kind == "object":
        return parse_object(info.cls, raw, path, errors)
    if kind == "raw":
        if not isinstance(raw, Mapping):
            raise SpecError(f"{path} must be an object, got {raw!r}")
        if shape is not None:
            parse_object(shape, raw, path, errors)
        return raw
    number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
    if kind == "int" and (isinstance(raw, bool) or not isinstance(raw, int)):
        raise SpecError(f"{path} must be an integer, got {raw!r}")
    if kind == "float" and not number:
        raise SpecError(f"{path} must be a number, got {raw!r}")
    if kind == "str" and not isinstance(raw, str):
        raise SpecError(f"{path} must be a string, got {raw!r}")
    if kind == "bool" and not isinstance(raw, bool):
        raise SpecError(f"{path} must be a boolean, got {raw!r}")
    if kind in ("quantity", "int-or-string") and not (isinstance(raw, str) or number and isinstance(raw, int)):
        raise SpecError(f"{path} must be an integer or a string, got {raw!r}")
    return float(raw) if kind == "float" else str(raw) if kind == "quantity" else raw


def check(c: Constraints, value: Any, path: str, errors: list[str]) -> None:
    """The bounds and rules of `c` on one parsed value; a failure is appended to `errors`."""
    if c.enum and value not in c.enum:
        errors.append(f"{path} must be one of {', '.join(map(str, c.enum))}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        lo, hi = c.minimum, c.maximum
        if lo is not None and hi is not None and not lo <= value <= hi:
            errors.append(f"{path} must be within {lo}..{hi}, got {value}")
        elif lo is not None and value < lo:
            errors.append(f"{path} must be >= {lo}, got {value}")
        elif hi is not None and value > hi:
            errors.append(f"{path} must be <= {hi}, got {value}")
    if isinstance(value, str):
        if c.min_length is not None and len(value) < c.min_length:
            errors.append(f"{path} must have at least {c.min_length} characters")
        if c.max_length is not None and len(value) > c.max_length:
            errors.append(f"{path} is longer than {c.max_length} characters")
        if c.pattern is not None and not re.search(c.pattern, value):
            errors.append(f"{path} {value!r} does not match {c.pattern}")
    if c.max_items is not None and isinstance(value, tuple) and len(value) > c.max_items:
        errors.append(f"{path} has more than {c.max_items} items")
    if c.max_properties is not None and isinstance(value, tuple) and len(value) > c.max_properties:
        errors.append(f"{path} has more than {c.max_properties} entries")
    errors += [r.message for r in c.rules if r.holds is not None and not r.holds(value)]


def dump(obj: Any) -> dict[str, Any]:
    """The wire object of a model (what `parse` reads back to an equal model): None and empty
    values left out, as the API server would not store them."""
    out: dict[str, Any] = {}
    vias: dict[str, tuple[type, dict[str, Any]]] = {}
    for f in fields_of(type(obj)):
        value = getattr(obj, f.name)
        if f.via is not None and f.type.kind != "array":
            vias.setdefault(f.json, (f.via[0], {}))[1][f.via[1]] = value
        elif value is not None and value != ():
            out[f.json] = _dump_value(f, value)
    for key, (cls, attrs) in vias.items():
        if any(v is not None for v in attrs.values()):
            out[key] = dump(cls(**attrs))
    return out


def _dump_value(f: FieldInfo, value: Any) -> Any:
    def one(v: Any, info: TypeInfo) -> Any:
        if f.via is not None:
            return dump(f.via[0](**{f.via[1]: v}))
        return dump(v) if info.kind == "object" else dict(v) if info.kind == "raw" else v

    if f.type.kind == "array":
        return [one(v, f.type.item) for v in value]
    if f.type.kind == "map":
        return {k: v for k, v in value}
    return one(value, f.type)
