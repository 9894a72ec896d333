"""The CEL validation rules of a CRD (``x-kubernetes-validations``), evaluated as the API
server does on every write, for the subset of CEL that the pinned CRDs use.

Kubernetes compiles each rule at CRD registration and evaluates it with ``self`` bound to
the value at the rule's place in the schema; a *transition rule* (one that names
``oldSelf``) is evaluated on an update only, and only where the old object had the value
too (in a list of ``x-kubernetes-list-type: map`` the old item is the one with the same
keys; in other lists item rules that name ``oldSelf`` are not evaluated). A rule that fails
(or cannot be evaluated, as a missing field) rejects the write with its ``message``.

The subset: literals (integers, strings, ``true``/``false``/``null``, lists), ``self`` and
``oldSelf``, field selection and indexing, ``has()``, ``size()``, ``!``, ``&&``, ``||``,
``==``/``!=``/``<``/``<=``/``>``/``>=``, ``in``, ``? :``, ``+``/``-``, and the methods
``matches``, ``startsWith``, ``endsWith``, ``contains``, ``size`` and the macros ``all``,
``exists``, ``exists_one``, ``filter``, ``map``. A rule outside it fails at load time
(:class:`CelError`), so no CRD loaded with CEL on has a rule that is silently skipped.
Regular expressions follow Go's ``$`` (end of text), as ``schemas.go_regexp``; CEL's
``matches`` is a search, not a whole match. ``&&``/``||`` short-circuit left to right (CEL
is commutative over errors; the pinned rules never rely on it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["CelError", "CelRule", "Rules", "compile_rule"]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+)|(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>==|!=|<=|>=|&&|\|\||[-+!<>()\[\].,?:]))"
)
Env = Mapping[str, Any]
Fn = Callable[[Env], Any]


class CelError(Exception):
    """A rule that does not parse in the subset, or a value it cannot be evaluated on."""


def _regexp(pattern: str) -> re.Pattern[str]:
    from bellows.emulator.schemas import go_regexp  # noqa: PLC0415 - schemas imports us

    return go_regexp(pattern)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise CelError(f"cannot parse {text!r} at {pos}")
        kind = match.lastgroup or ""
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), body)


class _MissingError(Exception):
    """A field selected on an object that lacks it (CEL's "no such key")."""


def _select(value: Any, name: str) -> Any:
    if not isinstance(value, Mapping):
        raise CelError(f"select .{name} on a {type(value).__name__}")
    if name not in value:
        raise _MissingError(name)
    return value[name]


def _size(value: Any) -> int:
    if isinstance(value, str | list | dict):
        return len(value)
    raise CelError(f"size() of a {type(value).__name__}")


def _compare(op: str, a: Any, b: Any) -> bool:
    if op == "==":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op == "in":
        return bool(a in b)
    if type(a) is not type(b) and not (isinstance(a, int) and isinstance(b, int)):
        raise CelError(f"no such overload: {type(a).__name__} {op} {type(b).__name__}")
    return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op])


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise CelError(f"unexpected end of {self.text!r}")
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise CelError(f"expected {want!r}, found {tok[1]!r} in {self.text!r}")
        self.i += 1
        return tok

    def parse(self) -> Fn:
        fn = self.ternary()
        if self.i != len(self.toks):
            raise CelError(f"unexpected {self.peek()!r} in {self.text!r}")
        return fn

    def ternary(self) -> Fn:
        cond = self.logical("||")
        if self.peek() != "?":
            return cond
        self.take("?")
        yes = self.ternary()
        self.take(":")
        no = self.ternary()
        return lambda env: yes(env) if _bool(cond(env)) else no(env)

    def logical(self, op: str) -> Fn:
        left = self.logical("&&") if op == "||" else self.relation()
        while self.peek() == op:
            self.take(op)
            right = self.logical("&&") if op == "||" else self.relation()
            left = _or(left, right) if op == "||" else _and(left, right)
        return left

    def relation(self) -> Fn:
        left = self.additive()
        while self.peek() in ("==", "!=", "<", "<=", ">", ">=", "in"):
            op = self.take()[1]
            right = self.additive()
            left = _relation(op, left, right)
        return left

    def additive(self) -> Fn:
        left = self.unary()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            right = self.unary()
            left = _plus(left, right) if op == "+" else _minus(left, right)
        return left

    def unary(self) -> Fn:
        if self.peek() == "!":
            self.take("!")
            inner = self.unary()
            return lambda env: not _bool(inner(env))
        if self.peek() == "-":
            self.take("-")
            inner = self.unary()
            return lambda env: -inner(env)
        return self.member()

    def args(self, close: str) -> list[Fn]:
        out: list[Fn] = []
        while self.peek() != close:
            out.append(self.ternary())
            if self.peek() == ",":
                self.take(",")
        self.take(close)
        return out

    def member(self) -> Fn:
        fn = self.primary()
        while self.peek() in (".", "["):
            if self.take()[1] == "[":
                index = self.ternary()
                self.take("]")
                fn = _indexed(fn, index)
                continue
            kind, name = self.take()
            if kind != "id":
                raise CelError(f"expected a field name after '.', found {name!r}")
            if self.peek() == "(":
                self.take("(")
                fn = self.method(fn, name)
            else:
                fn = _field(fn, name)
        return fn

    def method(self, target: Fn, name: str) -> Fn:
        if name in ("all", "exists", "exists_one", "filter", "map"):
            kind, var = self.take()
            if kind != "id":
                raise CelError(f"{name}() needs a variable name, found {var!r}")
            self.take(",")
            body = self.ternary()
            self.take(")")
            return _macro(name, target, var, body)
        args = self.args(")")
        simple: dict[str, Callable[..., Any]] = {
            "matches": lambda s, p: _regexp(p).search(s) is not None,
            "startsWith": lambda s, p: s.startswith(p),
            "endsWith": lambda s, p: s.endswith(p),
            "contains": lambda s, p: p in s,
            "size": _size,
        }
        if name not in simple:
            raise CelError(f"unsupported method {name}() in {self.text!r}")
        call = simple[name]
        return lambda env: call(target(env), *(a(env) for a in args))

    def primary(self) -> Fn:
        kind, text = self.take()
        if kind == "num":
            number = int(text)
            return lambda env: number
        if kind == "str":
            literal = _unquote(text)
            return lambda env: literal
        if text == "(":
            inner = self.ternary()
            self.take(")")
            return inner
        if text == "[":
            items = self.args("]")
            return lambda env: [item(env) for item in items]
        if kind != "id":
            raise CelError(f"unexpected {text!r} in {self.text!r}")
        constants = {"true": True, "false": False, "null": None}
        if text in constants:
            constant = constants[text]
            return lambda env: constant
        if self.peek() == "(":
            self.take("(")
            if text == "has":
                return self.has()
            args = self.args(")")
            if text == "size" and len(args) == 1:
                arg = args[0]
                return lambda env: _size(arg(env))
            raise CelError(f"unsupported function {text}() in {self.text!r}")
        name = text
        return lambda env: env[name] if name in env else _unbound(name)

    def has(self) -> Fn:
        """``has(x.f)``: whether ``x`` has field ``f`` (the macro, not a call)."""
        owner = self.primary()
        field: str | None = None
        while self.peek() == ".":
            self.take(".")
            kind, name = self.take()
            if kind != "id":
                raise CelError(f"expected a field name after '.', found {name!r}")
            if field is not None:
                owner = _field(owner, field)
            field = name
        self.take(")")
        if field is None:
            raise CelError(f"has() needs a field selection in {self.text!r}")
        last = field
        return lambda env: isinstance(o := owner(env), Mapping) and last in o


def _or(a: Fn, b: Fn) -> Fn:
    return lambda env: _bool(a(env)) or _bool(b(env))


def _and(a: Fn, b: Fn) -> Fn:
    return lambda env: _bool(a(env)) and _bool(b(env))


def _relation(op: str, a: Fn, b: Fn) -> Fn:
    return lambda env: _compare(op, a(env), b(env))


def _plus(a: Fn, b: Fn) -> Fn:
    return lambda env: a(env) + b(env)


def _minus(a: Fn, b: Fn) -> Fn:
    return lambda env: a(env) - b(env)


def _indexed(a: Fn, key: Fn) -> Fn:
    return lambda env: _index(a(env), key(env))


def _field(a: Fn, name: str) -> Fn:
    return lambda env: _select(a(env), name)


def _unbound(name: str) -> Any:
    raise CelError(f"undeclared reference to {name!r}")


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise CelError(f"no such overload: a {type(value).__name__} used as a bool")
    return value


def _index(value: Any, key: Any) -> Any:
    try:
        return value[key]
    except (KeyError, IndexError, TypeError) as err:
        raise _MissingError(str(key)) from err


def _macro(name: str, target: Fn, var: str, body: Fn) -> Fn:
    def run(env: Env) -> Any:
        items = target(env)
        if isinstance(items, Mapping):
            items = list(items)
        if not isinstance(items, list):
            raise CelError(f"{name}() on a {type(items).__name__}")
        results = [body({**env, var: item}) for item in items]
        if name == "map":
            return results
        if name == "filter":
            return [item for item, keep in zip(items, results, strict=True) if _bool(keep)]
        flags = [_bool(r) for r in results]
        if name == "all":
            return all(flags)
        if name == "exists":
            return any(flags)
        return flags.count(True) == 1

    return run


@dataclass(frozen=True)
class CelRule:
    """One compiled rule: the text, its message, and whether it names ``oldSelf``."""

    rule: str
    message: str
    transition: bool
    fn: Fn

    def holds(self, value: Any, old: Any = None) -> bool:
        env = {"self": value, "oldSelf": old} if self.transition else {"self": value}
        try:
            return _bool(self.fn(env))
        except (_MissingError, CelError, TypeError, re.error):
            return False  # the rule could not be evaluated on this value: the write fails


def compile_rule(spec: Mapping[str, Any]) -> CelRule:
    """The rule of one ``x-kubernetes-validations`` entry (:class:`CelError` outside the
    subset)."""
    text = str(spec.get("rule", ""))
    fn = _Parser(text).parse()
    transition = re.search(r"\boldSelf\b", text) is not None
    message = str(spec.get("message") or f"failed rule: {text}")
    return CelRule(text, message, transition, fn)


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
    for rule in node.rules:
        if rule.transition and not has_old:
            continue
        if not rule.holds(value, old if has_old else None):
            out.append((path or "<root>", value, rule.message))
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
