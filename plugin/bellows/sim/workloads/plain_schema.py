"""A fast "valid, or I cannot tell" check of a JSON document against a plain JSON Schema.

``jsonschema`` walks a trace line's schema in about a millisecond; a 16 000-job trace spent
seconds there. :func:`compile_check` turns a schema that uses only the plain keywords below
into a closure that answers ``True`` only for documents the schema accepts, and ``False``
for every other (invalid, or merely outside what it understands: a float where an integer is
asked, an unknown keyword). The caller then asks ``jsonschema``, which decides and names the
error, so the check can only make valid lines faster, never change what is refused.
``tests/sim/test_plain_schema.py`` holds it to ``jsonschema`` on generated documents.

Keywords: ``type`` (object, array, string, integer, number, boolean), ``properties``,
``required``, ``additionalProperties: false``, ``items``, ``minItems``, ``maxItems``,
``minLength``, ``minimum``, ``maximum``, ``exclusiveMinimum``; annotations (``title``,
``description``, ``default``, ``$schema``, ``$id``) are ignored. A schema with anything
else compiles to a check that always says ``False``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Check", "compile_check"]

Check = Callable[[object], bool]

_ANNOTATIONS = frozenset({"title", "description", "default", "$schema", "$id"})
_KNOWN = _ANNOTATIONS | {
    "type", "properties", "required", "additionalProperties", "items", "minItems",
    "maxItems", "minLength", "minimum", "maximum", "exclusiveMinimum",
}  # fmt: skip


def _never(_: object) -> bool:
    return False


def _is_type(kind: str, value: object) -> bool:
    if kind == "integer":  # an integral float (1.0) is one too: jsonschema decides those
        return type(value) is int
    if kind == "number":
        return type(value) in (int, float)
    if kind == "boolean":
        return type(value) is bool
    if kind == "string":
        return type(value) is str
    if kind == "array":
        return type(value) is list
    if kind == "object":
        return type(value) is dict
    return False


def _bounds(schema: Mapping[str, Any]) -> Check:
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")

    def check(value: Any) -> bool:
        if type(value) not in (int, float):
            return True  # bounds only constrain numbers
        return (
            (low is None or value >= low)
            and (high is None or value <= high)
            and (above is None or value > above)
        )

    return check


def compile_check(schema: Mapping[str, Any]) -> Check:
    """A check that says ``True`` only for documents ``schema`` accepts (module docstring)."""
    if not isinstance(schema, Mapping) or not set(schema) <= _KNOWN:
        return _never
    if schema.get("additionalProperties", False) is not False:
        return _never
    kind = schema.get("type")
    if not isinstance(kind, str):
        return _never
    bounds = _bounds(schema)
    props = {name: compile_check(sub) for name, sub in schema.get("properties", {}).items()}
    required = tuple(schema.get("required", ()))
    closed = "additionalProperties" in schema
    item = compile_check(schema["items"]) if "items" in schema else None
    min_items, max_items = schema.get("minItems", 0), schema.get("maxItems")
    min_length = schema.get("minLength", 0)

    def check(value: Any) -> bool:
        if not _is_type(kind, value) or not bounds(value):
            return False
        if kind == "string":
            return bool(len(value) >= min_length)
        if kind == "array":
            if len(value) < min_items or (max_items is not None and len(value) > max_items):
                return False
            return item is None or all(item(v) for v in value)
        if kind == "object":
            if any(name not in value for name in required):
                return False
            for name, sub in value.items():
                inner = props.get(name)
                if inner is None:
                    if closed:
                        return False
                elif not inner(sub):
                    return False
        return True

    return check
