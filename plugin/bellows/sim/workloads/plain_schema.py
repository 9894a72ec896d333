"""A fast "valid, or I cannot tell" check of a JSON document against a plain JSON Schema.

``jsonschema`` walks a trace line's schema in about a millisecond; a 16 000-job trace spent
seconds there. :func:`compile_check` turns a schema that uses only the plain keywords below
into one Python function written for that schema, its checks inline and its constants
literal (a few microseconds a line, where a tree of closures took ~40). It answers ``True``
only for documents the schema accepts, and ``False`` for every other (invalid, or merely
outside what it understands: a float where an integer is asked, an unknown keyword). The
caller then asks ``jsonschema``, which decides and names the error, so the check can only
make valid lines faster, never change what is refused. ``tests/sim/test_plain_schema.py``
holds it to ``jsonschema`` on generated documents.

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
# per JSON type, the Python types a decoded document holds (an integral float such as 1.0 is
# an integer to jsonschema: the check says no, and jsonschema decides)
_TYPES = {
    "integer": ("int",), "number": ("int", "float"), "boolean": ("bool",),
    "string": ("str",), "array": ("list",), "object": ("dict",),
}  # fmt: skip
_NUMBERS = (int, float)


class _UnsupportedError(Exception):
    """The schema uses something the check does not understand."""


def _never(_: object) -> bool:
    return False


class _Writer:
    """The source of one check function: nested blocks that ``return False`` on a miss."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.constants: dict[str, object] = {}
        self.names = 0

    def fresh(self, stem: str) -> str:
        self.names += 1
        return f"{stem}{self.names}"

    def constant(self, value: object) -> str:
        name = self.fresh("c")
        self.constants[name] = value
        return name

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def check(self, schema: object, var: str, depth: int) -> None:
        """Lines at ``depth`` that return False unless ``var`` satisfies ``schema``."""
        if not isinstance(schema, Mapping) or not set(schema) <= _KNOWN:
            raise _UnsupportedError
        if schema.get("additionalProperties", False) is not False:
            raise _UnsupportedError
        kind = schema.get("type")
        if not isinstance(kind, str) or kind not in _TYPES:
            raise _UnsupportedError
        types = " and ".join(f"type({var}) is not {t}" for t in _TYPES[kind])
        self.line(depth, f"if {types}:")
        self.line(depth + 1, "return False")
        if kind in ("integer", "number"):
            for key, op in (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">")):
                if key in schema:
                    bound = schema[key]
                    if type(bound) not in _NUMBERS:
                        raise _UnsupportedError
                    self.line(depth, f"if not {var} {op} {self.constant(bound)}:")
                    self.line(depth + 1, "return False")
        elif kind == "string":
            self._size(var, depth, schema.get("minLength", 0), None)
        elif kind == "array":
            self._size(var, depth, schema.get("minItems", 0), schema.get("maxItems"))
            if "items" in schema:
                item = self.fresh("x")
                self.line(depth, f"for {item} in {var}:")
                self.check(schema["items"], item, depth + 1)
        elif kind == "object":
            self._object(schema, var, depth)

    def _size(self, var: str, depth: int, least: object, most: object) -> None:
        for bound, op in ((least, "<"), (most, ">")):
            if bound is None or (op == "<" and bound == 0):
                continue
            if type(bound) is not int:
                raise _UnsupportedError
            self.line(depth, f"if len({var}) {op} {bound}:")
            self.line(depth + 1, "return False")

    def _object(self, schema: Mapping[str, Any], var: str, depth: int) -> None:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, Mapping) or not isinstance(required, list | tuple):
            raise _UnsupportedError
        if not all(isinstance(name, str) for name in [*required, *props]):
            raise _UnsupportedError
        for name in required:
            self.line(depth, f"if {name!r} not in {var}:")
            self.line(depth + 1, "return False")
        if "additionalProperties" in schema:  # closed: only the named properties
            self.line(depth, f"if not {var}.keys() <= {self.constant(frozenset(props))}:")
            self.line(depth + 1, "return False")
        for name, sub in props.items():
            inner = self.fresh("p")
            self.line(depth, f"{inner} = {var}.get({name!r}, _MISSING)")
            self.line(depth, f"if {inner} is not _MISSING:")
            self.check(sub, inner, depth + 1)


_MISSING = object()


def compile_check(schema: Mapping[str, Any]) -> Check:
    """A check that says ``True`` only for documents ``schema`` accepts (module docstring)."""
    writer = _Writer()
    try:
        writer.check(schema, "value", 1)
    except _UnsupportedError:
        return _never
    source = "\n".join(["def check(value):", *writer.lines, "    return True", ""])
    # our own source: names this writer made, the schema's keys as literals (repr), and
    # its bounds passed as constants; nothing from a document
    scope: dict[str, Any] = {**writer.constants, "_MISSING": _MISSING}
    exec(compile(source, "<plain_schema>", "exec"), scope)
    check: Check = scope["check"]
    return check
