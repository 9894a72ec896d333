"""Structural-schema checks of custom resources, as the Kubernetes API server makes them.

A CRD's ``openAPIV3Schema`` is a structural subset of OpenAPI v3. This module walks an object
against it the way the API server's validation does: types, ``required``, ``enum``,
``pattern``, bounds (``minItems``/``maxItems`` included), ``int32``/``int64`` ranges,
``x-kubernetes-int-or-string``, ``x-kubernetes-list-type`` (``set`` and ``map`` keys must be
unique) and ``x-kubernetes-preserve-unknown-fields``. It also applies ``default`` values, as
the server does on every write.

One deliberate difference: the real server *prunes* unknown fields (or rejects them only
under ``fieldValidation=Strict``); this checker always rejects them, so that a typo in a patch
Bellows builds fails a test instead of vanishing. CEL rules (``x-kubernetes-validations``,
many in Kueue's) are evaluated by :mod:`bellows.emulator.cel` for every CRD loaded with
``cel=True`` (Trainer's and the Kubeflow v1 kinds'; Kueue's are not evaluated), after the
structural checks pass, as the server does.

A ``pattern`` is matched as Go's ``regexp`` matches it: ``$`` is the end of the text, never
the place before a trailing newline (Python's ``$``), so ``"1\n"`` is no quantity.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from bellows.emulator.cel import Rules

__all__ = ["CustomResource", "FieldProblem", "SchemaChecker", "go_regexp", "load_crd"]

_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


@dataclass(frozen=True)
class FieldProblem:
    """One field that breaks the schema: its dotted path, the value, what was expected."""

    field: str
    value: object
    expected: str
    reason: str = "FieldValueInvalid"  # FieldValueForbidden: a change the server forbids

    def message(self) -> str:
        if self.reason == "FieldValueForbidden":
            return f"{self.field}: Forbidden: {self.expected}"
        shown = json.dumps(self.value)[:80] if _jsonable(self.value) else repr(self.value)
        return f"{self.field}: Invalid value: {shown}: {self.expected}"


def _jsonable(value: object) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


class SchemaChecker:
    """Validates and defaults objects against one structural schema."""

    def __init__(self, schema: Mapping[str, Any], *, cel: bool = False) -> None:
        self._schema = schema
        self._rules = Rules(schema) if cel else None

    def default(self, obj: dict[str, Any]) -> dict[str, Any]:
        """A copy of ``obj`` with the schema's ``default`` values filled in where absent."""
        out = copy.deepcopy(obj)
        _apply_defaults(self._schema, out)
        return out

    def problems(
        self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
    ) -> list[FieldProblem]:
        """Every violation in ``obj`` (``metadata`` is the API server's, not checked here);
        ``old`` is the object an update replaces (for CEL transition rules)."""
        found: list[FieldProblem] = []
        body = {k: v for k, v in obj.items() if k != "metadata"}
        schema = dict(self._schema)
        schema["properties"] = {
            k: v for k, v in self._schema.get("properties", {}).items() if k != "metadata"
        }
        _check(schema, body, "", found)
        if not found and self._rules is not None:
            found = [FieldProblem(f, v, m) for f, v, m in self._rules.violations(obj, old)]
        return found


def _apply_defaults(schema: Mapping[str, Any], value: object) -> None:
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                _apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for key, item in value.items():
                if key not in schema.get("properties", {}):
                    _apply_defaults(extra, item)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for item in value:
            _apply_defaults(schema["items"], item)


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _type_ok(kind: str, value: object) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "number" and isinstance(value, float):
        return True
    return isinstance(value, _JSON_TYPES.get(kind, (object,)))


def _check(schema: Mapping[str, Any], value: object, path: str, out: list[FieldProblem]) -> None:
    if value is None:
        if not schema.get("nullable", False):
            out.append(FieldProblem(path, value, "a value, not null"))
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            out.append(FieldProblem(path, value, "an integer or a string"))
            return
        if isinstance(value, str) and "pattern" in schema:
            _check_string(schema, value, path, out)
        return
    if "anyOf" in schema and not any(_fits(alt, value) for alt in schema["anyOf"]):
        out.append(FieldProblem(path, value, "a value matching one of the allowed forms"))
        return
    kind = schema.get("type")
    if kind is not None and not _type_ok(kind, value):
        out.append(FieldProblem(path, value, f"a value of type {kind}"))
        return
    if "enum" in schema and value not in schema["enum"]:
        out.append(FieldProblem(path, value, f"one of {schema['enum']}"))
    if isinstance(value, str):
        _check_string(schema, value, path, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, path, out)
    elif isinstance(value, list):
        _check_array(schema, value, path, out)
    elif isinstance(value, dict):
        _check_object(schema, value, path, out)


def _fits(schema: Mapping[str, Any], value: object) -> bool:
    found: list[FieldProblem] = []
    _check(schema, value, "", found)
    return not found


def _check_string(
    schema: Mapping[str, Any], value: str, path: str, out: list[FieldProblem]
) -> None:
    pattern = schema.get("pattern")
    if pattern is not None and go_regexp(pattern).search(value) is None:
        out.append(FieldProblem(path, value, f"a string matching {pattern}"))
    if schema.get("format") == "date-time":
        try:
            datetime.fromisoformat(value)
        except ValueError:
            out.append(FieldProblem(path, value, "an RFC 3339 date-time"))
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(FieldProblem(path, value, f"at most {schema['maxLength']} characters"))
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(FieldProblem(path, value, f"at least {schema['minLength']} characters"))


@functools.cache
def go_regexp(pattern: str) -> re.Pattern[str]:
    """``pattern`` (RE2 syntax, as a CRD writes it) compiled so that it matches what Go's
    ``regexp`` matches: each ``$`` outside a character class becomes ``\\Z``."""
    out: list[str] = []
    escaped = in_class = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            out.append(r"\Z")
            continue
        out.append(char)
    return re.compile("".join(out))


def _check_number(
    schema: Mapping[str, Any], value: float, path: str, out: list[FieldProblem]
) -> None:
    low, high = _INT_RANGES.get(schema.get("format", ""), (None, None))
    if low is not None and high is not None and not low <= value <= high:
        out.append(FieldProblem(path, value, f"a {schema['format']} in [{low}, {high}]"))
    if "minimum" in schema and value < schema["minimum"]:
        out.append(FieldProblem(path, value, f"a number >= {schema['minimum']}"))
    if "maximum" in schema and value > schema["maximum"]:
        out.append(FieldProblem(path, value, f"a number <= {schema['maximum']}"))


def _check_array(
    schema: Mapping[str, Any], value: list[Any], path: str, out: list[FieldProblem]
) -> None:
    items = schema.get("items")
    if isinstance(items, Mapping):
        for i, item in enumerate(value):
            _check(items, item, _join(path, i), out)
    if "minItems" in schema and len(value) < schema["minItems"]:
        out.append(FieldProblem(path, value, f"at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        out.append(FieldProblem(path, value, f"at most {schema['maxItems']} items"))
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen = [json.dumps(v, sort_keys=True) for v in value]
        if len(set(seen)) != len(seen):
            out.append(FieldProblem(path, value, "unique items (x-kubernetes-list-type: set)"))
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = json.dumps([item.get(k) for k in keys])
            if key in seen_keys:
                out.append(FieldProblem(_join(path, i), item, f"a unique key {keys}"))
            seen_keys.add(key)


def _check_object(
    schema: Mapping[str, Any], value: dict[str, Any], path: str, out: list[FieldProblem]
) -> None:
    props: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            out.append(FieldProblem(_join(path, name), None, "a required field"))
    extra = schema.get("additionalProperties")
    preserve = schema.get("x-kubernetes-preserve-unknown-fields", False)
    for key, item in value.items():
        if key in props:
            _check(props[key], item, _join(path, key), out)
        elif isinstance(extra, Mapping):
            _check(extra, item, _join(path, key), out)
        elif not (preserve or extra is True):
            out.append(FieldProblem(_join(path, key), item, "a field the schema declares"))


@dataclass(frozen=True)
class CustomResource:
    """One served version of a CRD: names, scope, subresources and its schema checker."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    status_subresource: bool
    checker: SchemaChecker
    # what discovery and kubectl's tables show: spec.names and the version's printer columns
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[Mapping[str, Any], ...] = ()


_NO_CEL = ("kueue.x-k8s.io",)  # groups whose CEL rules are not evaluated (docs/kube.md)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 15x faster on 9k-line CRDs


SchemaEdit = Callable[[str, dict[str, Any]], dict[str, Any]]


def load_crd(path: Path, edit: SchemaEdit | None = None) -> list[CustomResource]:
    """The served versions of the CRD in the YAML file at ``path``.

    No conversion between versions is emulated, so of several served versions (Kueue's
    ``v1beta1`` and ``v1beta2``) only the storage one is served: one object never lives
    twice, apart, under two versions. ``edit(kind, schema)``, when given, returns the
    schema to serve instead (an emulated future release of the CRD).
    """
    with path.open() as handle:
        crd = yaml.load(handle, Loader=_LOADER)
    spec = crd["spec"]
    cel = spec["group"] not in _NO_CEL
    out: list[CustomResource] = []
    served = [v for v in spec["versions"] if v.get("served", False)]
    if len(served) > 1:
        served = [v for v in served if v.get("storage", False)]
    for version in served:
        out.append(
            CustomResource(
                group=spec["group"],
                version=version["name"],
                plural=spec["names"]["plural"],
                kind=spec["names"]["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in version.get("subresources", {}),
                checker=SchemaChecker(
                    edit(spec["names"]["kind"], version["schema"]["openAPIV3Schema"])
                    if edit is not None
                    else version["schema"]["openAPIV3Schema"],
                    cel=cel,
                ),
                singular=spec["names"].get("singular", spec["names"]["kind"].lower()),
                short_names=tuple(spec["names"].get("shortNames") or ()),
                categories=tuple(spec["names"].get("categories") or ()),
                columns=tuple(version.get("additionalPrinterColumns") or ()),
            )
        )
    return out
