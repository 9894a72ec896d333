"""The CEL validation rules of a CRD (``x-kubernetes-validations``), evaluated as the API
server does on every write.

Kubernetes compiles each rule at CRD registration and evaluates it with ``self`` bound to
the value at the rule's place in the schema; a *transition rule* (one that names
``oldSelf``) is evaluated on an update only, and only where the old object had the value
too (in a list of ``x-kubernetes-list-type: map`` the old item is the one with the same
keys; in other lists item rules that name ``oldSelf`` are not evaluated). A rule that fails
(or cannot be evaluated, as a missing field) rejects the write with its ``message``, or
with what its ``messageExpression`` evaluates to when that is a non-blank one-line string
(else the ``message``, else ``failed rule: <rule>``, as the server words it).

The rules are compiled, checked and evaluated by ``cel-expr-python``, the CEL project's own
runtime (cel-cpp): standard CEL with its macros and the strings extension (version 2:
``lowerAscii``, ``indexOf``, ``split``, ...), as the API server's environment has, and
``self`` and ``oldSelf`` declared dynamic (the server types them from the schema, which
only moves a type error from load time to the first write). Regular expressions are RE2,
the syntax and semantics of Go's ``regexp``: ``matches`` is a search, ``$`` is the end of
the text, lookarounds do not compile. ``&&``/``||`` are commutative over errors, as in CEL
and the API server: ``self.b > 0 || has(self.a)`` holds on ``{"a": 1}``.

This module is the adapter: it walks the object as the schema nests (which rule sees which
value, and which old value) and words the outcome as the API server does. A rule that does
not compile, names a function the environment lacks, or cannot evaluate to a bool fails at
load time (:class:`CelError`), so no CRD loaded with CEL on has a rule that is silently
skipped. Kubernetes' own CEL libraries (``quantity()``, ``url()``, ``ip()``, ``cidr()``,
the lists library's ``isSorted``/``sum``/``min``/``max`` and the regex library's
``find``/``findAll``) are not declared: no rule of the pinned Trainer, Kueue and Kubeflow v1
CRDs calls one (``tests/emulator/test_cel_rules.py`` walks them all); one that did would be
refused at load, not skipped. docs/kube.md lists the rules and the cost per write.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]
from cel_expr_python.ext import ext_strings  # type: ignore[import-untyped]

__all__ = ["CelError", "CelRule", "Rules", "compile_rule"]


class CelError(Exception):
    """A rule that does not compile: a syntax error, an undeclared name or function, or a
    result that is not a bool (a ``messageExpression``'s: not a string)."""


@functools.cache
def _env() -> Any:
    """The compile environment: standard CEL and the strings extension (v2, as the API
    server's), ``self`` and ``oldSelf`` of any type."""
    return cel.NewEnv(
        variables={"self": cel.Type.DYN, "oldSelf": cel.Type.DYN},
        extensions=[ext_strings.ExtStrings(version=2)],
    )


def _compile(text: str, what: str, result: Any) -> Any:
    """``text`` compiled (:class:`CelError` if it does not, or if its type is known and is
    not ``result``)."""
    try:
        program = _env().compile(text)
    except (RuntimeError, ValueError) as err:
        raise CelError(f"{what} {text!r} does not compile: {err}") from err
    kind = program.return_type()
    if kind not in (result, cel.Type.DYN):
        raise CelError(f"{what} {text!r} evaluates to {kind.name()}, not {result.name()}")
    return program


def _bindings(value: Any, old: Any = None, *, transition: bool = False) -> Any:
    """``self`` (and ``oldSelf`` where ``transition``) for the rules at one place: one
    activation for them all, so that what they read of the value is converted to CEL once
    (cel-expr-python converts lazily and keeps what it converted)."""
    data = {"self": value, "oldSelf": old} if transition else {"self": value}
    return _env().Activation(data=data)


def _evaluate(program: Any, activation: Any) -> Any:
    """The program's value in ``activation``, or ``None`` where evaluating it failed (a
    missing field, no such overload, a value CEL cannot hold)."""
    try:
        result = program.eval(activation)
    except (RuntimeError, ValueError, TypeError):
        return None
    return None if result.type() == cel.Type.ERROR else result.value()


@dataclass(frozen=True)
class CelRule:
    """One compiled rule: the text, its message, and whether it names ``oldSelf``."""

    rule: str
    message: str
    transition: bool
    program: Any  # cel_expr_python's compiled Expression
    message_program: Any = None  # the compiled messageExpression, when the rule has one

    def holds(self, value: Any, old: Any = None) -> bool:
        """Whether the rule evaluates to ``true`` on ``self=value`` (``oldSelf=old`` for a
        transition rule); an error (a missing field, no such overload) or a non-bool
        result is a failed rule: the write is rejected."""
        return self.holds_in(_bindings(value, old, transition=self.transition))

    def holds_in(self, activation: Any) -> bool:
        """:meth:`holds` on the values :func:`_bindings` bound."""
        return _evaluate(self.program, activation) is True

    def message_for(self, value: Any, old: Any = None) -> str:
        """What the server says when the rule fails on ``value``: the
        ``messageExpression``'s string where it evaluates to a non-blank line, else the
        ``message``."""
        if self.message_program is None:
            return self.message
        said = _evaluate(self.message_program, _bindings(value, old, transition=self.transition))
        if isinstance(said, str) and said.strip() and "\n" not in said:
            return said
        return self.message


def compile_rule(spec: Mapping[str, Any]) -> CelRule:
    """The rule of one ``x-kubernetes-validations`` entry (:class:`CelError` if it, or its
    ``messageExpression``, does not compile)."""
    text = str(spec.get("rule", ""))
    program = _compile(text, "rule", cel.Type.BOOL)
    said = spec.get("messageExpression")
    message_program = (
        None if not said else _compile(str(said), "messageExpression", cel.Type.STRING)
    )
    named = text + " " + str(said or "")
    transition = re.search(r"\boldSelf\b", named) is not None
    message = str(spec.get("message") or f"failed rule: {text}")
    return CelRule(text, message, transition, program, message_program)


@dataclass(frozen=True)
class _Node:
    rules: tuple[CelRule, ...]
    properties: Mapping[str, _Node]
    additional: _Node | None
    items: _Node | None
    map_keys: tuple[str, ...] | None  # x-kubernetes-list-map-keys of a map list


def _build(schema: Mapping[str, Any]) -> _Node | None:
    rules = tuple(compile_rule(r) for r in schema.get("x-kubernetes-validations") or [])
    props = {
        key: node
        for key, sub in (schema.get("properties") or {}).items()
        if (node := _build(sub)) is not None
    }
    extra = schema.get("additionalProperties")
    additional = _build(extra) if isinstance(extra, Mapping) else None
    items_schema = schema.get("items")
    items = _build(items_schema) if isinstance(items_schema, Mapping) else None
    if not rules and not props and additional is None and items is None:
        return None
    keys = (
        tuple(schema.get("x-kubernetes-list-map-keys") or ())
        if schema.get("x-kubernetes-list-type") == "map"
        else None
    )
    return _Node(rules, props, additional, items, keys)


class Rules:
    """Every CEL rule of one schema, found by walking the object as the schema nests."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._root = _build(schema)

    @property
    def empty(self) -> bool:
        return self._root is None

    def violations(
        self, obj: Mapping[str, Any], old: Mapping[str, Any] | None
    ) -> list[tuple[str, object, str]]:
        """``(field, value, message)`` for each rule ``obj`` breaks (``old``: the object
        before an update, ``None`` on create)."""
        out: list[tuple[str, object, str]] = []
        if self._root is not None:
            _walk(self._root, obj, old, old is not None, "", out=out)
        return out


_ABSENT = object()


def _walk(
    node: _Node, value: Any, old: Any, has_old: bool, path: str, *, out: list[tuple[str, Any, str]]
) -> None:
    rules = [rule for rule in node.rules if has_old or not rule.transition]
    if rules:
        activation = _bindings(value, old, transition=has_old)
        for rule in rules:
            if not rule.holds_in(activation):
                message = rule.message_for(value, old if has_old else None)
                out.append((path or "<root>", value, message))
    if isinstance(value, Mapping):
        old_map = old if has_old and isinstance(old, Mapping) else {}
        for key, sub in node.properties.items():
            if key in value:
                there = key in old_map
                _walk(sub, value[key], old_map.get(key), there, _join(path, key), out=out)
        if node.additional is not None:
            for key, item in value.items():
                if key not in node.properties:
                    there = key in old_map
                    _walk(node.additional, item, old_map.get(key), there, _join(path, key), out=out)
    elif isinstance(value, list) and node.items is not None:
        olds = _correlate(node, value, old if has_old and isinstance(old, list) else None)
        for i, item in enumerate(value):
            before = olds[i]
            _walk(node.items, item, before, before is not _ABSENT, f"{path}[{i}]", out=out)


def _correlate(node: _Node, items: Sequence[Any], old: Sequence[Any] | None) -> list[Any]:
    """The old item of each item: by the map keys in a map list, else none (Kubernetes
    evaluates no transition rule on items of other lists)."""
    if old is None or not node.map_keys:
        return [_ABSENT] * len(items)
    keys = node.map_keys

    def key_of(item: Any) -> tuple[Any, ...] | None:
        return tuple(item.get(k) for k in keys) if isinstance(item, Mapping) else None

    by_key = {key_of(o): o for o in old}
    return [by_key.get(key_of(item), _ABSENT) for item in items]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
