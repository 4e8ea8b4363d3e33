"""The CRD's structural schema (openAPIV3Schema), written from the typed models.

What controller-gen does for Go API types: every field becomes a property with its type, bounds,
default and description, each rule an `x-kubernetes-validations` entry, and an object that a
field keeps as written (a Kubernetes type) gets its model's schema or stays free-form.
"""

from __future__ import annotations

from typing import Any

from .fields import Api, Constraints, FieldInfo, Rule, TypeInfo, description_of, fields_of, rules_of

# The order of the keys in a schema node, so the file reads the same way everywhere.
ORDER = ("type", "x-kubernetes-int-or-string", "format", "enum", "minimum", "maximum", "minLength", "maxLength",
         "pattern", "maxItems", "maxProperties", "default", "description", "required", "x-kubernetes-list-type",
         "x-kubernetes-list-map-keys", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-validations",
         "items", "additionalProperties", "properties")
TYPES = {"int": "integer", "float": "number", "str": "string", "bool": "boolean"}


def _ordered(node: dict[str, Any]) -> dict[str, Any]:
    unknown = set(node) - set(ORDER)
    assert not unknown, unknown
    return {key: node[key] for key in ORDER if key in node}


def rules(items: tuple[Rule, ...]) -> list[dict[str, str]]:
    return [{"rule": r.cel, "message": r.message, **({"fieldPath": r.field_path} if r.field_path else {})}
            for r in items]


def constraints(c: Constraints) -> dict[str, Any]:
    """The bounds of one node, as schema keys."""
    out: dict[str, Any] = {}
    for key, value in (("format", c.format), ("enum", list(c.enum) or None), ("minimum", c.minimum),
                       ("maximum", c.maximum), ("minLength", c.min_length), ("maxLength", c.max_length),
                       ("pattern", c.pattern), ("maxItems", c.max_items), ("maxProperties", c.max_properties)):
        if value is not None:
            out[key] = value
    if c.rules:
        out["x-kubernetes-validations"] = rules(c.rules)
    return out


def object_schema(cls: type, *, preserve_unknown: bool = False) -> dict[str, Any]:
    """A model as an object node: its properties, required fields and own rules. Fields that
    share a wire key (via) make one property."""
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in fields_of(cls):
        if f.json not in props:
            props[f.json] = field_schema(f)
        elif f.api.description:
            props[f.json]["description"] = f.api.description
        if f.api.required and f.json not in required:
            required.append(f.json)
    node: dict[str, Any] = {"type": "object"}
    if description := description_of(cls):
        node["description"] = description
    if required:
        node["required"] = required
    if preserve_unknown:
        node["x-kubernetes-preserve-unknown-fields"] = True
    if own := rules_of(cls):
        node["x-kubernetes-validations"] = rules(own)
    node["properties"] = props
    return _ordered(node)


def _value_schema(info: TypeInfo, a: Api, *, item: bool = False) -> dict[str, Any]:
    """The node of one value of type `info` (a field's, or an item's when `item`)."""
    if a.via is not None and (item or info.kind != "array"):
        return object_schema(a.via[0])
    if info.kind in TYPES:
        return {"type": TYPES[info.kind]}
    if info.kind in ("quantity", "int-or-string"):
        return {"x-kubernetes-int-or-string": True}
    if info.kind == "object":
        return object_schema(info.cls, preserve_unknown=a.preserve_unknown and not item)
    if info.kind == "raw":
        if a.shape is not None:
            return object_schema(a.shape)
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    inner = _value_schema(info.item, a, item=True)
    if a.item is not None:
        inner = _ordered({**inner, **constraints(a.item)})
    if info.kind == "array":
        return {"type": "array", "items": inner}
    return {"type": "object", "additionalProperties": inner}


def field_schema(f: FieldInfo) -> dict[str, Any]:
    """One property: the value's node, then the field's bounds, default, description and rules."""
    a = f.api
    node = _value_schema(f.type, a)
    own = node.pop("x-kubernetes-validations", [])
    node.update(constraints(a))
    if merged := own + node.get("x-kubernetes-validations", []):
        node["x-kubernetes-validations"] = merged
    if a.has_default:
        node["default"] = a.default
    if a.description:
        node["description"] = a.description
    if a.list_map_keys:
        node["x-kubernetes-list-type"] = "map"
        node["x-kubernetes-list-map-keys"] = list(a.list_map_keys)
    return _ordered(node)
