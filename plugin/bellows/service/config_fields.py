"""Typed configuration sections as data: their keys, how values convert, their JSON Schema.

A section is a frozen dataclass; a field whose type is another dataclass is a nested
section. File keys are the camelCase of the field names (``ack_wait_s`` →
``ackWaitSeconds``), env names the upper-case words behind ``BELLOWS_``
(``BELLOWS_NATS_ACK_WAIT_SECONDS``). ``field(metadata={"doc": ...})`` is the description;
a number's ``minimum``/``maximum`` there are its bounds (see ``bellows.bus.settings.bounded``).

Every value is converted through :mod:`bellows.inputs`: integers in ASCII digits within their
bounds, finite numbers, strings of bounded length without control characters.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from bellows.bus.settings import Secret
from bellows.inputs import (
    SpecError,
    check_float,
    check_int,
    parse_float,
    parse_int,
    shown,
)

__all__ = [
    "ENV_PREFIX",
    "ConfigError",
    "Leaf",
    "build",
    "convert",
    "file_key",
    "json_schema",
    "jsonable",
    "leaves",
    "markdown_table",
]

ENV_PREFIX = "BELLOWS_"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
_INT64_MAX = (1 << 63) - 1
MAX_TEXT_CHARS = 4096  # a path, a name, a URL, a password: none is longer


_SHOWN_NAME_CHARS = 4_096 + 64  # a path of PATH_MAX, and the words around it


class ConfigError(ValueError):
    """A configuration value is wrong; names the key, where it came from, and what is valid."""

    def __init__(self, key: str, value: object, valid: str, source: str = "") -> None:
        self.key = key
        self.value = value
        self.valid = valid
        self.source = source
        where = f" (from {_one_line(source)})" if source else ""
        # shown(): a hostile value (a 1 MiB string, a 5000-digit int) stays one short line;
        # a file's path, given by the operator and bounded by the OS, is shown whole
        text = repr(str(value)) if isinstance(value, PurePath) else shown(value)
        super().__init__(f"{_one_line(key)}={text}{where} is invalid: expected {valid}")


def _one_line(text: str) -> str:
    """A key or a source as given when it is short and printable; else quoted and cut: an
    unknown key from a file or a flag may hold anything (a newline, a megabyte)."""
    return text if len(text) <= _SHOWN_NAME_CHARS and text.isprintable() else shown(text)


class InvalidValueError(ValueError):
    def __init__(self, valid: str) -> None:
        self.valid = valid
        super().__init__(valid)


def file_key(name: str) -> str:
    """camelCase of a field name; a trailing ``_s`` reads ``Seconds``."""
    words = name.split("_")
    if len(words) > 1 and words[-1] == "s":
        words[-1] = "seconds"
    return words[0] + "".join(w.capitalize() for w in words[1:])


def _env_word(key: str) -> str:
    return "".join(f"_{c}" if c.isupper() else c.upper() for c in key)


@dataclass(frozen=True)
class Leaf:
    """One settable value: its path of file keys, of attribute names, type, default, bounds."""

    keys: tuple[str, ...]
    attrs: tuple[str, ...]
    hint: Any
    default: Any
    doc: str
    bounds: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False)

    @property
    def dotted(self) -> str:
        return ".".join(self.keys)

    @property
    def env(self) -> str:
        return ENV_PREFIX + "_".join(_env_word(k) for k in self.keys)

    @property
    def secret(self) -> bool:
        return Secret in _options(self.hint)


_BOUND_KEYS = ("minimum", "maximum", "open_min")


def _bounds(f: dataclasses.Field[Any]) -> dict[str, Any]:
    return {k: f.metadata[k] for k in _BOUND_KEYS if k in f.metadata}


def _options(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _is_section(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def sections(cls: type) -> list[tuple[str, str, Any, dataclasses.Field[Any]]]:
    """``(file key, attribute, type, field)`` for every field of a section class."""
    hints = typing.get_type_hints(cls)
    return [
        (f.metadata.get("key", file_key(f.name)), f.name, hints[f.name], f)
        for f in dataclasses.fields(cls)
        if f.init
    ]


def leaves(cls: type, keys: tuple[str, ...] = (), attrs: tuple[str, ...] = ()) -> list[Leaf]:
    """Every value of ``cls`` and its nested sections, depth first, in field order."""
    out: list[Leaf] = []
    for key, attr, hint, f in sections(cls):
        if _is_section(hint):
            out += leaves(hint, (*keys, key), (*attrs, attr))
        else:
            doc = str(f.metadata.get("doc", ""))
            out.append(Leaf((*keys, key), (*attrs, attr), hint, _default(f), doc, _bounds(f)))
    return out


def convert(
    hint: Any, raw: object, *, from_text: bool, bounds: Mapping[str, Any] | None = None
) -> Any:
    """``raw`` as a value of ``hint``; text (env, flags) is parsed, YAML values are checked.

    ``bounds`` (a leaf's ``minimum``, ``maximum``, ``open_min``) limit a number.
    """
    options = _options(hint)
    if type(None) in options:
        if raw is None or (from_text and isinstance(raw, str) and raw in ("", "null")):
            return None
        (hint,) = [o for o in options if o is not type(None)]
    elif raw is None:
        raise InvalidValueError(_describe(hint))
    return _convert_one(hint, raw, from_text=from_text, bounds=bounds or {})


def _convert_one(hint: Any, raw: object, *, from_text: bool, bounds: Mapping[str, Any]) -> Any:
    origin = typing.get_origin(hint)
    if hint is bool:
        if isinstance(raw, bool):
            return raw
        if from_text and isinstance(raw, str) and raw.lower() in _TRUE | _FALSE:
            return raw.lower() in _TRUE
        raise InvalidValueError("true or false")
    if hint is int or hint is float:
        return _number(hint, raw, from_text=from_text, bounds=bounds)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        if isinstance(raw, str) and raw in values:
            return hint(raw)
        raise InvalidValueError("one of " + ", ".join(repr(v) for v in values))
    if hint in (str, Path, Secret):
        return hint(_text(raw))
    if origin is tuple:
        items = raw.split(",") if from_text and isinstance(raw, str) else raw
        if not isinstance(items, list | tuple):
            raise InvalidValueError("a list of strings")
        items = [i.strip() if isinstance(i, str) else i for i in items if i != ""]
        if len(items) > _MAX_ITEMS:
            raise InvalidValueError(f"a list of at most {_MAX_ITEMS} strings")
        return tuple(_text(i, what="a list of non-empty strings") for i in items)
    if origin in (dict, Mapping):
        return _mapping(raw, from_text=from_text)
    raise TypeError(f"unsupported configuration type {hint!r}")


_MAX_ITEMS = 1000


def _text(raw: object, *, what: str = "a non-empty string") -> str:
    """A non-empty string of at most MAX_TEXT_CHARS without control characters.

    A NUL in a path would surface later as a ``ValueError`` from ``open``, a newline in a
    name as a broken log line or header: refuse them here, where the key is known.
    """
    valid = f"{what} of at most {MAX_TEXT_CHARS} characters, without control characters"
    if not isinstance(raw, str) or not raw or len(raw) > MAX_TEXT_CHARS:
        raise InvalidValueError(valid)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in raw):
        raise InvalidValueError(valid)
    return raw


def _number(hint: type, raw: object, *, from_text: bool, bounds: Mapping[str, Any]) -> int | float:
    """An int or float through bellows.inputs, within ``bounds`` (int64 at most)."""
    low = bounds.get("minimum", 0 if hint is int else -math.inf)
    high = bounds.get("maximum", _INT64_MAX if hint is int else math.inf)
    open_min = bool(bounds.get("open_min", False))
    try:
        if hint is int:
            if from_text and isinstance(raw, str):
                return parse_int("value", raw, minimum=int(low), maximum=int(high))
            if isinstance(raw, float) and raw.is_integer() and abs(raw) < 2**53:
                raw = int(raw)  # YAML written by a tool: 20.0 is 20
            return check_int("value", raw, minimum=int(low), maximum=int(high))
        if from_text and isinstance(raw, str):
            return parse_float("value", raw, minimum=low, maximum=high, open_min=open_min)
        return check_float("value", raw, minimum=low, maximum=high, open_min=open_min)
    except SpecError as exc:
        raise InvalidValueError(exc.valid) from None


def _mapping(raw: object, *, from_text: bool) -> dict[str, str]:
    if from_text and isinstance(raw, str):
        pairs = [p for p in raw.split(",") if p]
        if not all("=" in p for p in pairs):
            raise InvalidValueError("key=value pairs separated by commas")
        raw = dict(p.split("=", 1) for p in pairs)
    what = "a mapping of strings to strings"
    if not isinstance(raw, dict) or len(raw) > _MAX_ITEMS:
        raise InvalidValueError(what)
    return {_text(k, what=what): _text(v, what=what) for k, v in raw.items()}


def _describe(hint: Any) -> str:
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    return names.get(hint, str(hint))


Values = Mapping[tuple[str, ...], tuple[Any, str]]
"""Already converted values by attribute path, each with the source it came from."""


def build(cls: type, values: Values, keys: tuple[str, ...] = (), at: tuple[str, ...] = ()) -> Any:
    """An instance of ``cls`` from ``values`` (defaults elsewhere); errors name the key."""
    kwargs: dict[str, Any] = {}
    key_of: dict[str, str] = {}
    for key, attr, hint, _ in sections(cls):
        key_of[attr] = key
        if _is_section(hint):
            kwargs[attr] = build(hint, values, (*keys, key), (*at, attr))
        elif (*at, attr) in values:
            kwargs[attr] = values[(*at, attr)][0]
    try:
        return cls(**kwargs)
    except SpecError as exc:
        base, bracket, rest = exc.field.partition("[")
        attr = base.split(".")[0]
        key = ".".join((*keys, key_of.get(attr, base))) + bracket + rest
        source = values.get((*at, attr), (None, "default"))[1]
        masked = Secret.MASK if isinstance(exc.value, Secret) else exc.value
        raise ConfigError(key, masked, exc.valid, source) from None


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12 subset) of ``cls``: unknown keys are refused."""
    properties: dict[str, Any] = {}
    for key, _, hint, f in sections(cls):
        if _is_section(hint):
            sub = json_schema(hint)
        else:
            sub = _leaf_schema(hint)
            _bound_schema(sub, _bounds(f))
            default = _default(f)
            if default is not dataclasses.MISSING:
                sub["default"] = jsonable(default)
        doc = f.metadata.get("doc")
        if doc:
            sub["description"] = doc
        properties[key] = sub
    out: dict[str, Any] = {"type": "object", "additionalProperties": False}
    if cls.__doc__:
        out["description"] = cls.__doc__.strip().splitlines()[0]
    out["properties"] = properties
    return out


def _leaf_schema(hint: Any) -> dict[str, Any]:
    options = _options(hint)
    nullable = type(None) in options
    (core,) = [o for o in options if o is not type(None)]
    schema: dict[str, Any]
    if isinstance(core, type) and issubclass(core, enum.Enum):
        schema = {"enum": [m.value for m in core] + ([None] if nullable else [])}
        return schema
    origin = typing.get_origin(core)
    if core is bool:
        schema = {"type": "boolean"}
    elif core is int:
        schema = {"type": "integer"}
    elif core is float:
        schema = {"type": "number"}
    elif origin is tuple:
        schema = {"type": "array", "items": {"type": "string", "minLength": 1}}
    elif origin in (dict, Mapping):
        schema = {"type": "object", "additionalProperties": {"type": "string"}}
    else:
        schema = {"type": "string", "minLength": 1}
        if core is Secret:
            schema["writeOnly"] = True
    if nullable:
        schema["type"] = [schema["type"], "null"]
    return schema


def _bound_schema(schema: dict[str, Any], bounds: Mapping[str, Any]) -> None:
    if "minimum" in bounds:
        key = "exclusiveMinimum" if bounds.get("open_min") else "minimum"
        schema[key] = bounds["minimum"]
    if "maximum" in bounds:
        schema["maximum"] = bounds["maximum"]


def _range_text(bounds: Mapping[str, Any]) -> str:
    if "minimum" not in bounds:
        return ""
    low = "(" if bounds.get("open_min") else "["
    return f" {low}{_number_text(bounds['minimum'])}, {_number_text(bounds['maximum'])}]"


def _number_text(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:g}"


def jsonable(value: Any) -> Any:
    """A default or configured value as plain JSON data (enums, tuples, paths, mappings)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def markdown_table(cls: type) -> str:
    """A Markdown table of every key: type, default, env variable and description."""
    rows = ["| key | type | default | env | description |", "|---|---|---|---|---|"]
    for leaf in leaves(cls):
        default = None if leaf.default is dataclasses.MISSING else jsonable(leaf.default)
        given = f"`{json.dumps(default, ensure_ascii=False)}`"
        kind = _type_name(leaf.hint) + _range_text(leaf.bounds)
        rows.append(f"| `{leaf.dotted}` | {kind} | {given} | `{leaf.env}` | {leaf.doc} |")
    return "\n".join(rows) + "\n"


def _type_name(hint: Any) -> str:
    schema = _leaf_schema(hint)
    if "enum" in schema:
        return " \\| ".join("null" if v is None else str(v) for v in schema["enum"])
    kind = schema["type"]
    name = " \\| ".join(kind) if isinstance(kind, list) else kind
    return name + (" (secret)" if Secret in _options(hint) else "")
